"""Ouro building blocks: RMSNorm, RoPE, attention, SwiGLU MLP and the sandwich-norm layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.model.config import OuroConfig
from kernels.attention import AttentionBackend, AttentionMetadata


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) in fp32, cast back, then times the weight (Qwen/Llama)."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [N, head_dim] for rotate-half RoPE, computed in fp32 then cast."""
    freqs = positions.float()[:, None] * inv_freq.float()[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rope_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [N, heads, head_dim]; non-interleaved rotate-half form."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class OuroAttention(nn.Module):
    def __init__(self, cfg: OuroConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.scale = cfg.head_dim**-0.5
        h, q, kv = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, (
            cfg.num_key_value_heads * cfg.head_dim
        )
        self.q_proj = nn.Linear(h, q, bias=False)
        self.k_proj = nn.Linear(h, kv, bias=False)
        self.v_proj = nn.Linear(h, kv, bias=False)
        self.o_proj = nn.Linear(q, h, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> torch.Tensor:
        n = x.shape[0]
        q = apply_rope(self.q_proj(x).view(n, self.num_heads, self.head_dim), cos, sin)
        k = apply_rope(self.k_proj(x).view(n, self.num_kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_dim)
        k_cache, v_cache = kv_cache
        out = backend.forward(
            q, k.to(k_cache.dtype), v.to(v_cache.dtype), k_cache, v_cache, meta, self.scale
        )
        projected: torch.Tensor = self.o_proj(out.reshape(n, self.num_heads * self.head_dim))
        return projected


class OuroMLP(nn.Module):
    def __init__(self, cfg: OuroConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class OuroDecoderLayer(nn.Module):
    """Sandwich norms: pre- and post-norm around both attention and MLP (HF names kept)."""

    def __init__(self, cfg: OuroConfig) -> None:
        super().__init__()
        self.self_attn = OuroAttention(cfg)
        self.mlp = OuroMLP(cfg)
        eps = cfg.rms_norm_eps
        self.input_layernorm = RMSNorm(cfg.hidden_size, eps)
        self.input_layernorm_2 = RMSNorm(cfg.hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps)  # pre-MLP
        self.post_attention_layernorm_2 = RMSNorm(cfg.hidden_size, eps)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> torch.Tensor:
        a = self.self_attn(self.input_layernorm(x), cos, sin, kv_cache, meta, backend)
        x = x + self.input_layernorm_2(a)
        m = self.mlp(self.post_attention_layernorm(x))
        out: torch.Tensor = x + self.post_attention_layernorm_2(m)
        return out
