"""Reference packed paged attention in plain torch (CPU and CUDA), softmax in fp32.

Decode sequences (query length 1) are attended together over a padded gather of their
histories; each prompt sequence is attended on its own with a causal mask offset by its
prefix. Clear rather than fast: it is the oracle the Triton kernel is tested against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

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


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float
) -> torch.Tensor:
    """q [n, H, Dh]; k/v [n, L, KVH, Dh] (one history per query row, decode) or [L, KVH, Dh]
    (one history shared by all rows, a prompt sequence); visible [n, L] -> [n, H, Dh]."""
    n, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[-2]
    qg = q.float().view(n, num_kv_heads, num_heads // num_kv_heads, head_dim)
    per_row = k.dim() == 4
    spec_k = "nlkd" if per_row else "lkd"
    scores = torch.einsum(f"nkgd,{spec_k}->nkgl", qg, k.float()) * scale
    scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum(f"nkgl,{spec_k}->nkgd", probs, v.float())
    return out.reshape(n, num_heads, head_dim).to(q.dtype)


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
            out[:nd] = _attend(
                q[:nd], k_flat[state.decode_slots], v_flat[state.decode_slots],
                state.decode_visible, scale,
            )
        for seq in state.prompts:
            rows = slice(seq.row_start, seq.row_start + seq.num_rows)
            out[rows] = _attend(
                q[rows], k_flat[seq.kv_slots], v_flat[seq.kv_slots], seq.visible, scale
            )
        return out
