"""Reference packed paged attention in plain torch (CPU and CUDA), computed in fp32.

Decode sequences (query length 1) are attended together over a padded gather of their
histories; each prompt sequence is attended on its own with a causal mask offset by its
prefix. Both go through torch's scaled_dot_product_attention on fp32 inputs with an explicit
mask. Clear rather than fast: it is the oracle the Triton kernel is tested against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kernels.attention.base import AttentionBackend, AttentionMetadata


@dataclass(slots=True)
class _PromptSeq:
    row_start: int
    num_rows: int
    kv_slots: torch.Tensor  # [context_len]
    visible: torch.Tensor  # [num_rows, context_len] bool (causal within the sequence)


@dataclass(slots=True)
class _TorchRefState:
    decode_slots: torch.Tensor | None  # [num_decode, max_len]
    decode_visible: torch.Tensor | None  # [num_decode, max_len] bool
    prompts: list[_PromptSeq]


def _slots(block_tables: torch.Tensor, length: int, block_size: int) -> torch.Tensor:
    """Flat KV slots of positions 0..length-1 for every table row: [rows, length]."""
    pos = torch.arange(length, device=block_tables.device)
    return block_tables[:, pos // block_size] * block_size + pos % block_size


def _gather(flat: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """flat [num_slots, KVH, Dh] at slots [n, L] -> [n, L, KVH, Dh] (index_select is several
    times faster than advanced indexing here)."""
    return flat.index_select(0, slots.reshape(-1)).view(*slots.shape, *flat.shape[1:])


def _sdpa_supports_gqa() -> bool:
    q = torch.zeros(1, 2, 1, 2)
    kv = torch.zeros(1, 1, 1, 2)
    try:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    except TypeError:  # torch < 2.5
        return False
    return True


_GQA = _sdpa_supports_gqa()


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention in fp32. q [B, H, Lq, Dh]; k/v [B, KVH, Lk, Dh]; visible [B, 1, Lq, Lk]."""
    dtype = q.dtype
    if dtype != torch.float32:
        q, k, v = q.float(), k.float(), v.float()
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    extra: dict[str, bool] = {}
    if num_heads != num_kv_heads:
        if _GQA:
            extra["enable_gqa"] = True
        else:
            k = k.repeat_interleave(num_heads // num_kv_heads, dim=1)
            v = v.repeat_interleave(num_heads // num_kv_heads, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=scale, **extra)
    return out.to(dtype)


class TorchRefBackend(AttentionBackend):
    """Packed paged attention for mixed decode/prompt batches, every sequence on its plane."""

    name = "torch"

    def prepare(self, meta: AttentionMetadata) -> None:
        device = meta.block_tables.device
        nd = meta.num_decode_seqs
        decode_slots = decode_visible = None
        if nd:
            max_len = max(meta.context_lens_host[:nd])
            decode_slots = _slots(meta.block_tables[:nd], max_len, meta.block_size)
            pos = torch.arange(max_len, device=device)
            decode_visible = pos[None, :] < meta.context_lens[:nd, None]
            decode_slots = decode_slots.masked_fill(~decode_visible, 0)
        prompts: list[_PromptSeq] = []
        row = nd
        for s in range(nd, meta.num_seqs):
            ctx, n = meta.context_lens_host[s], meta.query_lens_host[s]
            slots = _slots(meta.block_tables[s : s + 1], ctx, meta.block_size)[0]
            key_pos = torch.arange(ctx, device=device)
            query_pos = torch.arange(ctx - n, ctx, device=device)
            prompts.append(_PromptSeq(row, n, slots, key_pos[None, :] <= query_pos[:, None]))
            row += n
        meta.backend_state = _TorchRefState(decode_slots, decode_visible, prompts)

    def attend(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        state = meta.backend_state
        if not isinstance(state, _TorchRefState):
            raise RuntimeError("torch attention: prepare(meta) was not called for this core call")
        num_kv_heads, head_dim = k_cache.shape[-2:]
        k_flat = k_cache.view(-1, num_kv_heads, head_dim)
        v_flat = v_cache.view(-1, num_kv_heads, head_dim)
        out = torch.empty_like(q)
        nd = meta.num_decode_seqs
        if nd:
            assert state.decode_slots is not None and state.decode_visible is not None
            slots = state.decode_slots
            out[:nd] = _attend(
                q[:nd, :, None, :],
                _gather(k_flat, slots).permute(0, 2, 1, 3),
                _gather(v_flat, slots).permute(0, 2, 1, 3),
                state.decode_visible[:, None, None, :],
                scale,
            )[:, :, 0]
        for seq in state.prompts:
            rows = slice(seq.row_start, seq.row_start + seq.num_rows)
            out[rows] = _attend(
                q[rows].transpose(0, 1)[None],
                k_flat.index_select(0, seq.kv_slots).transpose(0, 1)[None],
                v_flat.index_select(0, seq.kv_slots).transpose(0, 1)[None],
                seq.visible[None, None],
                scale,
            )[0].transpose(0, 1)
        return out
