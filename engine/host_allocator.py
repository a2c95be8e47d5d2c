"""Keep glibc from returning large freed blocks to the OS between steps.

Eager torch on CPU allocates per-step temporaries of several MB (the decode gather of K/V
grows with context: rows x context x KV heads x head dim). glibc serves blocks above its
mmap threshold with mmap and trims the heap top past its trim threshold, so such blocks are
mapped, zero-faulted and unmapped again on every step, and the page faults slow the CPU loop
(docs/fidelity.md, "Effects measured on the same machine"). A calibration rig that measured
large shapes early has a raised dynamic threshold and does not fault, so without this the
profile and the real loop measure different allocators.
"""

from __future__ import annotations

import ctypes
import platform

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_MAX = -4


def steady_allocator() -> str | None:
    """Serve every block from the heap and never trim it (glibc ``mallopt``); returns a
    description of what was set, or None where this is not glibc (nothing changed)."""
    if platform.system() != "Linux":
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    settings = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 1 << 30), (_M_TOP_PAD, 64 << 20))
    if not all(mallopt(param, value) == 1 for param, value in settings):
        return None
    return "glibc: mmap off, trim threshold 1 GiB, top pad 64 MiB"
