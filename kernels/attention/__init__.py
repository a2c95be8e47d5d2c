"""Attention backends. ``get_backend(name)`` builds one; unavailable ones raise ValueError.

``torch`` (the fp32 reference) runs everywhere; ``triton`` (the packed paged kernel) where
triton imports and either CUDA is present or ``TRITON_INTERPRET=1`` runs its CPU
interpreter; ``flash_attn_4`` (FA4's packed paged forward) on CUDA SM90+ with the ``fa4`` extra.
``auto`` (``resolve_backend``) is triton on CUDA and torch elsewhere; it picks flash_attn_4 on
SM90+ only once ``FA4_IN_AUTO`` is set, after the GPU check has validated it.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from kernels.attention.base import AttentionBackend, AttentionMetadata, AttentionShape
from kernels.attention.flash_attn4 import fa4_unavailable
from kernels.attention.torch_ref import TorchRefBackend

# Backends planned behind the same interface (docs/design.md); none ships yet.
_PLANNED = {
    "torch_varlen": "the adapter for torch's CUDA varlen attention is not implemented yet",
    "flash_attn": "use flash_attn_4 (FA4's packed paged forward)",
}
FA4_IN_AUTO = False  # not yet validated on a GPU (docs/gpu.md); then auto takes it on SM90+


def interpreter_requested() -> bool:
    """TRITON_INTERPRET set the way Triton reads it (1, true, on, yes)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


def triton_unavailable() -> str | None:
    """Why ``triton`` cannot run here (None when it can)."""
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (pip install triton, or the project's gpu extra)"
    if torch.cuda.is_available() or interpreter_requested():
        return None
    return ("no CUDA device here; run on a GPU, or set TRITON_INTERPRET=1 for Triton's (slow) "
            "CPU interpreter, or use attention_backend: torch")


def available_backends() -> list[str]:
    """Names ``get_backend`` accepts on this machine (``auto`` aside)."""
    return (["torch"] + (["triton"] if triton_unavailable() is None else [])
            + (["flash_attn_4"] if fa4_unavailable() is None else []))


def resolve_backend(name: str, device: torch.device | str) -> str:
    """``auto`` -> ``triton`` on CUDA when it can run there, else ``torch``; other names as
    given."""
    if name != "auto":
        return name
    if FA4_IN_AUTO and torch.device(device).type == "cuda" and fa4_unavailable() is None:
        return "flash_attn_4"
    return "triton" if torch.device(device).type == "cuda" and triton_unavailable() is None \
        else "torch"


def get_backend(name: str, shape: AttentionShape | None = None) -> AttentionBackend:
    """An attention backend by name (``configure``d with ``shape`` when given)."""
    backend: AttentionBackend
    if name == "torch":
        backend = TorchRefBackend()
    elif name == "triton":
        why = triton_unavailable()
        if why is not None:
            raise ValueError(f"attention_backend: 'triton' is not available: {why}")
        from kernels.attention.triton_backend import TritonBackend

        backend = TritonBackend()
    elif name == "flash_attn_4":
        why = fa4_unavailable()
        if why is not None:
            raise ValueError(f"attention_backend: 'flash_attn_4' is not available: {why}")
        from kernels.attention.flash_attn4 import FlashAttn4Backend

        backend = FlashAttn4Backend()
    elif name in _PLANNED:
        raise ValueError(f"attention_backend: {name!r} is not available: {_PLANNED[name]}")
    else:
        raise ValueError(
            f"attention_backend: unknown backend {name!r}; use auto or one of "
            f"{', '.join(available_backends())}"
        )
    if shape is not None:
        backend.configure(shape)
    return backend


__all__ = [
    "AttentionBackend",
    "AttentionMetadata",
    "AttentionShape",
    "TorchRefBackend",
    "FA4_IN_AUTO",
    "available_backends",
    "get_backend",
    "resolve_backend",
    "triton_unavailable",
]
