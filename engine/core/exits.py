"""Exit deciders (docs/design.md): when a decode token leaves the loop.

A decider is per request. ``start_token`` is called when a decode token enters the loop,
``needs_signal(depth)`` before each depth it runs, ``after_depth(num_depths_done, signal)``
after it; the latter returns True when the token exits now. Depths are zero-based;
``num_depths_done`` counts them and is what ``min_loops`` / ``max_loops`` bound. ``fixed``,
``trace`` and ``categorical`` never need a signal, so the simulator and the real runner see
the same depths by construction.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

from engine.core.config import ExitConfig


class ExitDecider:
    """Per-request exit state machine; the base never exits early and reads no signal.

    A base class rather than a Protocol so compiled callers dispatch through a vtable.
    ``signal_head`` names the head whose score ``after_depth`` expects ("gate" or
    "lookahead").
    """

    signal_head = "gate"
    computes_signal = False
    """Whether the mode has an exit signal to read back at all (ouro, ouro_delayed and
    random_lookahead); with ``readback_skip`` off such a token reads it on every loop."""

    def start_token(self, index: int) -> None:
        """A decode token producing output ``index`` (1-based after the prompt's) enters."""

    def needs_signal(self, depth: int) -> bool:
        """Whether the gate signal of zero-based ``depth`` is needed for this token."""
        return False

    def after_depth(self, num_depths_done: int, signal: float | None) -> bool:
        """Record one finished depth; True when the token exits after ``num_depths_done``."""
        raise NotImplementedError


def stable_seed(*parts: object) -> int:
    """A platform-independent 64-bit seed from arbitrary parts."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def reads_signals(exit_threshold: float) -> bool:
    """Whether an ``ouro``, ``ouro_delayed`` or ``random_lookahead`` decider at
    ``exit_threshold`` ever reads a signal's value: at 1 or above no token exits early, so a
    signal read back (``readback_skip`` off) is never used."""
    return exit_threshold < 1.0


class FixedExit(ExitDecider):
    def __init__(self, max_loops: int) -> None:
        self.max_loops = max_loops

    def after_depth(self, num_depths_done: int, signal: float | None) -> bool:
        return num_depths_done >= self.max_loops


class TargetExit(ExitDecider):
    """Exit after a depth known when the token starts (trace and categorical)."""

    def __init__(self, min_loops: int, max_loops: int) -> None:
        self.min_loops = min_loops
        self.max_loops = max_loops
        self.target = max_loops

    def _target(self, index: int) -> int:
        raise NotImplementedError

    def start_token(self, index: int) -> None:
        self.target = min(self.max_loops, max(self.min_loops, self._target(index)))

    def after_depth(self, num_depths_done: int, signal: float | None) -> bool:
        return num_depths_done >= self.target


class TraceExit(TargetExit):
    def __init__(self, trace: Sequence[int], min_loops: int, max_loops: int) -> None:
        super().__init__(min_loops, max_loops)
        self.trace = tuple(trace)

    def _target(self, index: int) -> int:
        return self.trace[index]


class CategoricalExit(TargetExit):
    def __init__(self, probs: Sequence[float], seed: int, min_loops: int, max_loops: int) -> None:
        super().__init__(min_loops, max_loops)
        self.depths = list(range(1, len(probs) + 1))
        self.probs = list(probs)
        self.rng = random.Random(seed)

    def _target(self, index: int) -> int:
        return self.rng.choices(self.depths, weights=self.probs)[0]


def _require(signal: float | None, num_depths_done: int) -> float:
    # NaN marks a row nobody computed a signal for (a runner's unread row, a profile row past
    # its exit): reading it here is a policy mismatch, never a value.
    if signal is None or math.isnan(signal):
        raise ValueError(f"exit decider: missing gate signal after loop {num_depths_done}")
    return float(signal)


class OuroExit(ExitDecider):
    """Hazard accumulation; ``delayed`` exits one loop after the threshold is crossed."""

    computes_signal = True

    def __init__(self, threshold: float, min_loops: int, max_loops: int, delayed: bool) -> None:
        self.threshold = threshold
        self.min_loops = min_loops
        self.max_loops = max_loops
        self.delayed = delayed
        self.adaptive = reads_signals(threshold)
        self.remaining = 1.0
        self.pending: int | None = None

    def start_token(self, index: int) -> None:
        self.remaining = 1.0
        self.pending = None

    def needs_signal(self, depth: int) -> bool:
        if not self.adaptive or self.pending is not None:
            return False
        # The last loop's gate is ignored; a delayed crossing at max_loops-1 changes nothing.
        horizon = self.max_loops - 1 if self.delayed else self.max_loops
        return depth + 1 < horizon

    def after_depth(self, num_depths_done: int, signal: float | None) -> bool:
        if num_depths_done >= self.max_loops:
            return True
        if self.pending is not None:
            return num_depths_done >= self.pending
        if not self.needs_signal(num_depths_done - 1):
            return False
        self.remaining *= 1.0 - _require(signal, num_depths_done)
        crossed = num_depths_done >= self.min_loops and 1.0 - self.remaining >= self.threshold
        if not crossed:
            return False
        if self.delayed:
            self.pending = num_depths_done + 1
            return False
        return True


class LookaheadExit(ExitDecider):
    """A score read as "exit after one more loop" (random_lookahead)."""

    signal_head = "lookahead"
    computes_signal = True

    def __init__(self, threshold: float, min_loops: int, max_loops: int) -> None:
        self.threshold = threshold
        self.min_loops = min_loops
        self.max_loops = max_loops
        self.adaptive = reads_signals(threshold)
        self.pending: int | None = None

    def start_token(self, index: int) -> None:
        self.pending = None

    def needs_signal(self, depth: int) -> bool:
        return self.adaptive and self.pending is None and depth + 2 < self.max_loops

    def after_depth(self, num_depths_done: int, signal: float | None) -> bool:
        if num_depths_done >= self.max_loops:
            return True
        if self.pending is not None:
            return num_depths_done >= self.pending
        if not self.needs_signal(num_depths_done - 1):
            return False
        score = _require(signal, num_depths_done)
        if score >= self.threshold and num_depths_done + 1 >= self.min_loops:
            self.pending = num_depths_done + 1
        return False


def make_decider(
    cfg: ExitConfig,
    num_depths: int,
    *,
    request_key: str,
    trace: Sequence[int] | None = None,
    seed: int | None = None,
) -> ExitDecider:
    """Build a request's decider; ``trace`` is required for ``trace`` mode."""
    max_loops = cfg.resolved_max_loops(num_depths)
    if cfg.mode == "fixed":
        return FixedExit(max_loops)
    if cfg.mode in ("ouro", "ouro_delayed"):
        return OuroExit(cfg.exit_threshold, cfg.min_loops, max_loops, cfg.mode == "ouro_delayed")
    if cfg.mode == "random_lookahead":
        return LookaheadExit(cfg.exit_threshold, cfg.min_loops, max_loops)
    if cfg.mode == "trace":
        if trace is None:
            raise ValueError(f"exit_trace: request {request_key!r} uses trace mode without a trace")
        return TraceExit(trace, cfg.min_loops, max_loops)
    assert cfg.probs is not None
    rng_seed = stable_seed("categorical", cfg.seed if seed is None else seed, request_key)
    return CategoricalExit(cfg.probs, rng_seed, cfg.min_loops, max_loops)


def validate_trace(
    trace: Sequence[int], cfg: ExitConfig, num_depths: int, max_tokens: int, request_id: str
) -> None:
    """Check a trace before admission: long enough, first entry D, each within bounds."""
    max_loops = cfg.resolved_max_loops(num_depths)
    if len(trace) < max_tokens:
        raise ValueError(
            f"exit_trace: request {request_id!r} has {len(trace)} depths for max_tokens "
            f"{max_tokens}; give one per output token"
        )
    if trace[0] != num_depths:
        raise ValueError(
            f"exit_trace: request {request_id!r} starts with {trace[0]}; the first token "
            f"always runs all {num_depths} depths"
        )
    for d in trace[1:]:
        if not cfg.min_loops <= d <= max_loops:
            raise ValueError(
                f"exit_trace: request {request_id!r} has depth {d} outside "
                f"[{cfg.min_loops}, {max_loops}]"
            )
