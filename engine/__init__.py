"""The real engine (model, runner, LLM facade) over the pure scheduling core ``engine.core``.

Importing ``engine`` installs the mypyc build of ``engine.core`` and the simulator's per-step
modules when it is fresh (``engine._native``); Python runs this before ``engine.core``, and
``sim`` imports ``engine.core`` before its own modules (``engine/_native.py``, requirement 2).
"""

from engine import _native

_native.install()
