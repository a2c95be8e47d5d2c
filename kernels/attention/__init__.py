"""Attention backends. ``get_backend(name)`` builds one; unavailable ones raise ValueError."""

from __future__ import annotations

from kernels.attention.base import AttentionBackend, AttentionMetadata
from kernels.attention.torch_ref import TorchRefBackend

# Backends planned behind the same interface (DESIGN.md §8); none ships yet.
_PLANNED = {
    "triton": "the Triton packed paged kernel lands in a later issue",
    "torch_varlen": "the adapter for torch's CUDA varlen attention is not implemented yet",
    "flash_attn": "the flash-attn adapter is not implemented yet",
}


def available_backends() -> list[str]:
    """Names ``get_backend`` accepts on this machine."""
    return ["torch"]


def get_backend(name: str) -> AttentionBackend:
    """An attention backend by name (``torch`` works everywhere)."""
    if name == "torch":
        return TorchRefBackend()
    if name in _PLANNED:
        raise ValueError(f"attention_backend: {name!r} is not available: {_PLANNED[name]}")
    raise ValueError(
        f"attention_backend: unknown backend {name!r}; use one of {', '.join(available_backends())}"
    )


__all__ = [
    "AttentionBackend",
    "AttentionMetadata",
    "TorchRefBackend",
    "available_backends",
    "get_backend",
]
