"""The Ouro model split into prelude (embedding), one recurrent depth, gate and coda."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.model.config import OuroConfig
from engine.model.layers import OuroDecoderLayer, RMSNorm, rope_cos_sin, rope_inv_freq
from kernels.attention import AttentionBackend, AttentionMetadata

KVCaches = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (k_cache, v_cache)


class OuroModel(nn.Module):
    """``model.*`` in HF naming: embedding, the shared layer stack, final norm and gate."""

    inv_freq: torch.Tensor  # RoPE table, fp32, not in the checkpoint

    def __init__(self, cfg: OuroConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(OuroDecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.early_exit_gate = nn.Linear(cfg.hidden_size, 1, bias=True)
        self.register_buffer(
            "inv_freq", rope_inv_freq(cfg.head_dim, cfg.rope_theta), persistent=False
        )


class OuroForCausalLM(nn.Module):
    """Ouro with an untied ``lm_head``. Depth is not an argument of ``recurrent``: it only
    selects each row's KV plane, which the attention metadata already encodes."""

    def __init__(self, cfg: OuroConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = OuroModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    @property
    def num_depths(self) -> int:
        return self.config.total_ut_steps

    def prelude(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Token ids [N] -> hidden [N, hidden]."""
        hidden: torch.Tensor = self.model.embed_tokens(token_ids)
        return hidden

    def recurrent(
        self,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: KVCaches,
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> torch.Tensor:
        """One depth over packed rows (each at its own position and plane): every layer,
        then the shared final norm. The output is the next depth's input and the coda's."""
        cos, sin = rope_cos_sin(positions, self.model.inv_freq, hidden.dtype)
        x = hidden
        for layer, kv in zip(self.model.layers, kv_caches, strict=True):
            x = layer(x, cos, sin, kv, meta, backend)
        out: torch.Tensor = self.model.norm(x)
        return out

    def gate(self, hidden: torch.Tensor) -> torch.Tensor:
        """Exit probability lambda = sigmoid(gate logit), computed in fp32: [N]."""
        g = self.model.early_exit_gate
        logit = F.linear(hidden.float(), g.weight.float(), g.bias.float())
        return torch.sigmoid(logit)[:, 0]

    def coda(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden [N, hidden] -> fp32 logits [N, vocab]."""
        logits: torch.Tensor = self.lm_head(hidden)
        return logits.float()
