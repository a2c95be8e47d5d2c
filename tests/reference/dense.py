"""Dense no-cache Ouro forward: every position recomputed at every depth, no paging, no packing.

Physical early exit follows the last_exited rule: a token that ran ``loops[j]`` depths stops
there, and a query at depth d reads its K/V from depth min(d, loops[j] - 1). RoPE and the
attention maths are written out here independently of ``engine.model.layers``; only the
weights (and RMSNorm / MLP modules) are shared.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.model.ouro import OuroForCausalLM


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """x [T, heads, head_dim]: pairs (i, i + head_dim/2) rotated by position * theta^(-2i/hd)."""
    half = x.shape[-1] // 2
    i = torch.arange(half, dtype=torch.float64)
    angle = positions.double()[:, None] * theta ** (-2.0 * i / x.shape[-1])
    cos, sin = angle.cos()[:, None, :].to(x.dtype), angle.sin()[:, None, :].to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


@torch.no_grad()
def dense_hidden(
    model: OuroForCausalLM, token_ids: Sequence[int], loops: Sequence[int]
) -> list[dict[int, torch.Tensor]]:
    """Per depth d, {position: hidden after depth d} for every position that ran depth d.

    ``loops[j]`` is how many depths token j runs (D for prompt tokens).
    """
    cfg = model.config
    num_depths, num_tokens = cfg.total_ut_steps, len(token_ids)
    heads, kv_heads, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    ids = torch.tensor(list(token_ids))
    positions = torch.arange(num_tokens)
    loops_t = torch.tensor(list(loops))
    h = model.model.embed_tokens(ids)
    # kv[l] holds, per position, the K/V version current readers see (last depth it ran).
    k_hist = [torch.zeros(num_tokens, kv_heads, hd) for _ in range(cfg.num_hidden_layers)]
    v_hist = [torch.zeros(num_tokens, kv_heads, hd) for _ in range(cfg.num_hidden_layers)]
    out: list[dict[int, torch.Tensor]] = []
    for d in range(num_depths):
        active = (loops_t > d).nonzero()[:, 0]
        x = h[active]
        for layer_idx, layer in enumerate(model.model.layers):
            attn = layer.self_attn
            a_in = layer.input_layernorm(x)
            pos = positions[active]
            q = _rope(attn.q_proj(a_in).view(-1, heads, hd), pos, cfg.rope_theta)
            k = _rope(attn.k_proj(a_in).view(-1, kv_heads, hd), pos, cfg.rope_theta)
            v = attn.v_proj(a_in).view(-1, kv_heads, hd)
            # Inactive (exited) tokens keep the version of their last depth.
            k_hist[layer_idx][active] = k.float()
            v_hist[layer_idx][active] = v.float()
            keys = k_hist[layer_idx].repeat_interleave(heads // kv_heads, dim=1)
            vals = v_hist[layer_idx].repeat_interleave(heads // kv_heads, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q.float(), keys) / hd**0.5
            causal = positions[None, :] <= pos[:, None]
            scores = scores.masked_fill(~causal[None], float("-inf"))
            o = torch.einsum("hqk,khd->qhd", scores.softmax(-1), vals).to(x.dtype)
            x = x + layer.input_layernorm_2(attn.o_proj(o.reshape(len(active), heads * hd)))
            x = x + layer.post_attention_layernorm_2(layer.mlp(layer.post_attention_layernorm(x)))
        x = model.model.norm(x)
        h = h.clone()
        h[active] = x
        out.append({int(j): x[i] for i, j in enumerate(active.tolist())})
    return out
