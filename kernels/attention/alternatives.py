"""torch's own ways to do packed paged attention, as the bench's baselines (not backends).

``sdpa``: the reference's gathers (one padded gather for the decode rows, one per prompt)
with scaled_dot_product_attention in the inputs' dtype, so torch picks its fused kernels.
``flex``: every sequence's history gathered into one packed K/V, and ``flex_attention``
(compiled) with a block mask that keeps each query on its own sequence and causal.
Per-call state (gather indices, masks, the block mask) is built in ``prepare``, outside the
timed region, as a backend's ``prepare`` would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from kernels.attention.base import AttentionMetadata
from kernels.attention.torch_ref import TorchRefBackend

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _gqa(num_heads: int, num_kv_heads: int) -> dict[str, bool]:
    return {"enable_gqa": True} if num_heads != num_kv_heads else {}


def sdpa(meta: AttentionMetadata, scale: float) -> Attend:
    """SDPA over gathered KV in the native dtype; returns attend(q, k_cache, v_cache)."""
    ref = TorchRefBackend()
    ref.prepare(meta)
    state: Any = meta.backend_state
    nd = meta.num_decode_seqs

    def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        kvh, dim = k_cache.shape[-2:]
        kf, vf = k_cache.view(-1, kvh, dim), v_cache.view(-1, kvh, dim)
        extra = _gqa(q.shape[1], kvh)
        out = torch.empty_like(q)
        if nd:
            slots = state.decode_slots
            k = kf.index_select(0, slots.reshape(-1)).view(*slots.shape, kvh, dim)
            v = vf.index_select(0, slots.reshape(-1)).view(*slots.shape, kvh, dim)
            out[:nd] = F.scaled_dot_product_attention(
                q[:nd, :, None, :], k.transpose(1, 2), v.transpose(1, 2),
                attn_mask=state.decode_visible[:, None, None, :], scale=scale, **extra)[:, :, 0]
        for seq in state.prompts:
            rows = slice(seq.row_start, seq.row_start + seq.num_rows)
            out[rows] = F.scaled_dot_product_attention(
                q[rows].transpose(0, 1)[None],
                kf.index_select(0, seq.kv_slots).transpose(0, 1)[None],
                vf.index_select(0, seq.kv_slots).transpose(0, 1)[None],
                attn_mask=seq.visible[None, None], scale=scale, **extra)[0].transpose(0, 1)
        return out

    return attend


_FLEX: Any = None


def flex(meta: AttentionMetadata, scale: float, num_heads: int, num_kv_heads: int) -> Attend:
    """Compiled flex_attention over one packed gather of every sequence's history."""
    global _FLEX
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if _FLEX is None:
        _FLEX = torch.compile(flex_attention, dynamic=False)
    device = meta.block_tables.device
    ctx, qlen = meta.context_lens_host, meta.query_lens_host
    bs = meta.block_size
    slots, kv_seq, kv_pos, q_seq, q_pos = [], [], [], [], []
    tables = meta.block_tables.tolist()  # prepare time: a readback is fine here
    for s, (c, n) in enumerate(zip(ctx, qlen, strict=True)):
        slots += [tables[s][p // bs] * bs + p % bs for p in range(c)]
        kv_seq += [s] * c
        kv_pos += list(range(c))
        q_seq += [s] * n
        q_pos += list(range(c - n, c))

    def ints(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, device=device, dtype=torch.int64)

    slot_t, kvs, kvp, qs, qp = map(ints, (slots, kv_seq, kv_pos, q_seq, q_pos))

    def visible(b: Any, h: Any, qi: Any, ki: Any) -> Any:
        return (qs[qi] == kvs[ki]) & (kvp[ki] <= qp[qi])

    mask = create_block_mask(visible, 1, 1, len(q_seq), len(slots), device=device)
    extra = _gqa(num_heads, num_kv_heads)

    def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        kvh, dim = k_cache.shape[-2:]
        k = k_cache.view(-1, kvh, dim).index_select(0, slot_t).transpose(0, 1)[None]
        v = v_cache.view(-1, kvh, dim).index_select(0, slot_t).transpose(0, 1)[None]
        out = _FLEX(q.transpose(0, 1)[None], k, v, block_mask=mask, scale=scale, **extra)
        return out[0].transpose(0, 1)

    return attend
