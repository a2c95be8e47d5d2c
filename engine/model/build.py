"""Build an Ouro model: a preset with seeded random weights, or an HF checkpoint directory."""

from __future__ import annotations

import os

import torch

from engine.model.alloc import default_dtype, empty_model
from engine.model.loader import load_checkpoint
from engine.model.ouro import OuroForCausalLM
from engine.model.presets import PRESETS, get_preset


def _is_norm(name: str) -> bool:
    return name.endswith("norm.weight") or "layernorm" in name


@torch.no_grad()
def init_random_weights(model: OuroForCausalLM, seed: int, *,
                        on_device: bool = False) -> OuroForCausalLM:
    """Seeded N(0, initializer_range) weights, norms at 1, gate bias 0. Drawn on CPU, so the
    same on every device; ``on_device`` draws them where the model lives instead (fast for
    1.4B parameters on a GPU, but the values then depend on the device: timing only)."""
    device = next(model.parameters()).device if on_device else torch.device("cpu")
    gen = torch.Generator(device=device).manual_seed(seed)
    std = model.config.initializer_range
    for name, param in model.named_parameters():
        if _is_norm(name):
            param.fill_(1.0)
        elif name.endswith("bias"):
            param.zero_()
        elif on_device:
            param.normal_(0.0, std, generator=gen)
        else:
            param.copy_(torch.randn(param.shape, generator=gen) * std)
    return model


def build_model(
    name_or_dir: str,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
) -> OuroForCausalLM:
    """A preset name (random weights from ``seed``) or a checkpoint directory, ready for eval."""
    dtype = dtype or default_dtype(device)
    if name_or_dir not in PRESETS and os.path.isdir(name_or_dir):
        return load_checkpoint(name_or_dir, device=device, dtype=dtype)
    cfg = get_preset(name_or_dir)
    return init_random_weights(empty_model(cfg, device, dtype), seed)
