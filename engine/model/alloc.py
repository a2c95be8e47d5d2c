"""Allocating a model: the default dtype of a device and an uninitialised model on it
(shared by random-weight presets, ``engine.model.build``, and checkpoints,
``engine.model.loader``)."""

from __future__ import annotations

import torch

from engine.model.config import OuroConfig
from engine.model.layers import rope_inv_freq
from engine.model.ouro import OuroForCausalLM


def default_dtype(device: torch.device | str) -> torch.dtype:
    """fp32 on CPU, bf16 on CUDA."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def empty_model(cfg: OuroConfig, device: torch.device | str, dtype: torch.dtype) -> OuroForCausalLM:
    """An uninitialised model on ``device`` (built on meta, so no throwaway init)."""
    with torch.device("meta"):
        model = OuroForCausalLM(cfg)
    model = model.to_empty(device=device).to(dtype)
    # The RoPE table stays fp32 whatever the weight dtype.
    model.model.inv_freq = rope_inv_freq(cfg.head_dim, cfg.rope_theta).to(device)
    model.eval().requires_grad_(False)
    return model
