"""The core's exceptions. Kept out of the mypyc build (``tools/build_native.py``): raised at
most once per run, they gain nothing from compiling."""

from __future__ import annotations


class KVIntegrityError(RuntimeError):
    """A write or read that would expose uninitialised or stale KV history, or a corrupt
    block pool."""


class StaleResultError(ValueError):
    """A result that does not fit the batch it claims to answer."""
