"""Attention backends for packed, paged, mixed-depth batches."""
