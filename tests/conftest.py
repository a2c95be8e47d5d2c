"""Session setup shared by every test module.

Without CUDA, Triton kernels run in Triton's CPU interpreter, which reads TRITON_INTERPRET
when a kernel module is imported: so it is set here, before any test imports one (a GPU
machine runs them compiled). Subprocesses the tests start inherit it.
"""

from __future__ import annotations

import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
