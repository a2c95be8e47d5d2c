"""Session setup shared by every test module.

Without a GPU, Triton kernels run in Triton's CPU interpreter, which reads TRITON_INTERPRET
when a kernel module is imported: so it is set here, before any test imports one (a GPU
machine runs them compiled). Subprocesses the tests start inherit it.
"""

from __future__ import annotations

import os

if "TRITON_INTERPRET" not in os.environ and not os.path.exists("/dev/nvidiactl"):
    os.environ["TRITON_INTERPRET"] = "1"
