"""The attention backend interface and the per-core-call metadata every backend reads.

A core call packs sequences: the first ``num_decode_seqs`` are decode rows (query length 1),
then each prompt item is one causal sequence of ``query_len`` rows. Every sequence reads and
writes its own paged KV (one request, one depth plane): ``block_tables[s]`` lists its block
ids, ``context_lens[s]`` counts its KV positions after this call's writes, and its queries sit
at the last ``query_len`` of those positions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(slots=True)
class AttentionMetadata:
    """Device tensors plus their host copies (so backends never read lengths back)."""

    slot_mapping: torch.Tensor  # [num_rows] int64: flat KV slot (block * block_size + offset)
    block_tables: torch.Tensor  # [num_seqs, max_num_blocks] int64, padded with 0
    context_lens: torch.Tensor  # [num_seqs] int64
    query_start_loc: torch.Tensor  # [num_seqs + 1] int64 (cu_seqlens_q)
    block_size: int
    num_decode_seqs: int
    context_lens_host: tuple[int, ...]
    query_lens_host: tuple[int, ...]
    backend_state: Any = field(default=None)

    @property
    def num_seqs(self) -> int:
        return len(self.context_lens_host)

    @property
    def num_rows(self) -> int:
        return sum(self.query_lens_host)

    @property
    def max_context_len(self) -> int:
        return max(self.context_lens_host, default=0)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens_host, default=0)


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """What a backend needs to know about the model before its first call."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype


class AttentionBackend(ABC):
    """Writes the call's K/V into the paged caches, then attends over each sequence's history.

    ``prepare`` runs once per core call (its result is reused by every layer); ``forward`` runs
    per layer. Implementations: ``torch`` (reference, CPU and CUDA) and ``triton`` (the packed
    paged kernel, CUDA or Triton's CPU interpreter); adapters for torch's varlen attention or
    flash-attn would plug in here.
    """

    name: str = "base"
    shape: AttentionShape | None = None

    def configure(self, shape: AttentionShape) -> None:
        """Record the model's attention shape (the runner calls it once); a backend that
        cannot serve it raises a one-line ``ValueError`` naming the value."""
        self.shape = shape

    def prepare(self, meta: AttentionMetadata) -> None:
        """Precompute per-call state (gather indices, masks) into ``meta.backend_state``."""
        meta.backend_state = None

    def graph_key(self, meta: AttentionMetadata) -> Hashable | None:
        """The launch shape of a prepared call that a captured graph can replay (equal keys:
        the same kernels and arguments, inputs in the same buffers); None when this backend
        cannot be captured. May set host scalars of the state to values valid for the whole
        key (a graph keeps the ones it was captured with)."""
        return None

    def refill(self, captured: AttentionMetadata, meta: AttentionMetadata) -> None:
        """Copy ``meta``'s per-call device state into the ``captured`` call's (same key);
        a backend whose state is all in the static buffers has nothing to copy."""
        return None

    def write_kv(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> None:
        """Store rows' K/V ([num_rows, num_kv_heads, head_dim]) at ``meta.slot_mapping``."""
        num_kv_heads, head_dim = k_cache.shape[-2:]
        k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, meta.slot_mapping, k)
        v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, meta.slot_mapping, v)

    @abstractmethod
    def attend(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """Causal attention of ``q`` [num_rows, num_heads, head_dim] over paged history."""

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """One layer: write this call's K/V, then attend (rows see their own K/V)."""
        self.write_kv(k, v, k_cache, v_cache, meta)
        return self.attend(q, k_cache, v_cache, meta, scale)
