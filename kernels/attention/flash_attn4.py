"""The ``flash_attn_4`` backend: FA4's packed varlen forward (``flash_attn.cute``) over the
paged KV cache, one call per layer for every sequence of a core call (RFC §3).

Each decode row is a length-1 sequence and each prompt item one causal sequence of its query
rows, in the call's row order: ``cu_seqlens_q`` is the call's query starts, ``seqused_k`` its
context lengths (keys after this call's writes) and ``page_table`` its block tables, all int32
as FA4 takes them. FA4's causal mask is aligned bottom-right, so a sequence's queries see the
keys up to their own positions: the same rows and keys as the Triton kernel's programs. The
cache layout [blocks, block_size, kv_heads, head_dim] is FA4's paged K/V layout; a block size
other than the kernel's key tile takes its non-TMA paged path, which needs a head dimension
divisible by 16 (checked at start, with dtype and architecture). Runs on CUDA only (SM90+);
``prepare`` is plain torch, so the metadata is tested on the CPU.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch

from kernels.attention.base import AttentionBackend, AttentionMetadata, AttentionShape

DTYPES = (torch.float16, torch.bfloat16)
MIN_CAPABILITY = (9, 0)


def fa4_unavailable() -> str | None:
    """Why ``flash_attn_4`` cannot run here (None when it can)."""
    if importlib.util.find_spec("flash_attn") is None or importlib.util.find_spec(
            "flash_attn.cute") is None:
        return "flash-attn-4 is not installed (pip install 'loopserve[fa4]')"
    if not torch.cuda.is_available():
        return "it runs on CUDA only; use attention_backend: triton or torch"
    capability = torch.cuda.get_device_capability()
    if capability < MIN_CAPABILITY:
        return (f"it needs compute capability 9.0 or newer (SM90+), not "
                f"{capability[0]}.{capability[1]}; use attention_backend: triton")
    return None


def check_shape(shape: AttentionShape, capability: tuple[int, int] | None) -> None:
    """One-line ValueError for a model FA4 cannot serve over this cache layout."""
    if shape.dtype not in DTYPES:
        raise ValueError(f"attention_backend: flash_attn_4 runs float16 or bfloat16, not "
                         f"{shape.dtype}; set runner.dtype")
    if shape.num_kv_heads < 1 or shape.num_heads % shape.num_kv_heads:
        raise ValueError(f"attention_backend: flash_attn_4 needs num_heads ({shape.num_heads}) "
                         f"a multiple of num_kv_heads ({shape.num_kv_heads})")
    hd = shape.head_dim
    # The paged cache's block size need not be the kernel's key tile only through the
    # non-TMA paged path, which needs head_dim % 16 == 0.
    if hd % 16:
        raise ValueError(f"attention_backend: flash_attn_4 on a paged cache needs head_dim "
                         f"divisible by 16, not {hd}; use attention_backend: triton")
    major = capability[0] if capability is not None else 9
    fits = 16 <= hd <= 256 if major == 9 else (hd <= 128 or hd == 256)
    if not fits:
        raise ValueError(f"attention_backend: flash_attn_4 on SM{major}x does not take "
                         f"head_dim {hd}; use attention_backend: triton")


@dataclass(slots=True)
class FA4Args:
    """The per-call arguments of ``flash_attn_varlen_func`` (every layer reuses them)."""

    cu_seqlens_q: torch.Tensor  # [num_seqs + 1] int32
    seqused_k: torch.Tensor  # [num_seqs] int32
    page_table: torch.Tensor  # [num_seqs, max_pages] int32, contiguous
    max_seqlen_q: int
    max_seqlen_k: int


def fa4_args(meta: AttentionMetadata) -> FA4Args:
    """FA4's view of one core call (plain torch: runs on any device)."""
    width = max(1, -(-meta.max_context_len // meta.block_size))
    return FA4Args(
        cu_seqlens_q=meta.query_start_loc.to(torch.int32),
        seqused_k=meta.context_lens.to(torch.int32),
        page_table=meta.block_tables[:, :width].to(torch.int32).contiguous(),
        max_seqlen_q=max(1, meta.max_query_len),
        max_seqlen_k=max(1, meta.max_context_len),
    )


class FlashAttn4Backend(AttentionBackend):
    """FA4's packed paged forward; the KV write is the base ``index_copy_``."""

    name = "flash_attn_4"

    def __init__(self, capability: tuple[int, int] | None = None) -> None:
        self.capability = capability  # None: the current CUDA device's, when there is one
        self._fn: Any = None

    def configure(self, shape: AttentionShape) -> None:
        capability = self.capability
        if capability is None and torch.cuda.is_available():
            capability = torch.cuda.get_device_capability()
        check_shape(shape, capability)
        self.shape = shape

    def prepare(self, meta: AttentionMetadata) -> None:
        meta.backend_state = fa4_args(meta)

    def graph_key(self, meta: AttentionMetadata) -> Hashable | None:
        args = meta.backend_state
        if not isinstance(args, FA4Args):
            raise RuntimeError("flash_attn_4: prepare(meta) was not called for this core call")
        # Host bounds enter FA4's kernel choice and must cover every replay: the whole page
        # table and every row of the bucket.
        args.page_table = meta.block_tables.to(torch.int32).contiguous()
        args.max_seqlen_k = args.page_table.shape[1] * meta.block_size
        args.max_seqlen_q = 1 if meta.num_decode_seqs == meta.num_seqs else \
            meta.slot_mapping.shape[0]
        return (meta.num_seqs, meta.num_decode_seqs, args.page_table.shape[1],
                args.max_seqlen_q, args.max_seqlen_k)

    def refill(self, captured: AttentionMetadata, meta: AttentionMetadata) -> None:
        old, new = captured.backend_state, meta.backend_state
        assert isinstance(old, FA4Args) and isinstance(new, FA4Args)
        old.cu_seqlens_q.copy_(new.cu_seqlens_q)
        old.seqused_k.copy_(new.seqused_k)
        old.page_table.copy_(new.page_table)

    def attend(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
               meta: AttentionMetadata, scale: float) -> torch.Tensor:
        args = meta.backend_state
        if not isinstance(args, FA4Args):
            raise RuntimeError("flash_attn_4: prepare(meta) was not called for this core call")
        if self._fn is None:
            from flash_attn.cute import flash_attn_varlen_func  # type: ignore[import-not-found]

            self._fn = flash_attn_varlen_func
        out, _ = self._fn(
            q, k_cache, v_cache, cu_seqlens_q=args.cu_seqlens_q, seqused_k=args.seqused_k,
            page_table=args.page_table, max_seqlen_q=args.max_seqlen_q,
            max_seqlen_k=args.max_seqlen_k, softmax_scale=scale, causal=True,
        )
        return out  # type: ignore[no-any-return]
