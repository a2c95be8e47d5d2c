"""The profile's ``readback`` term: what one exit-signal readback adds to a recurrent step
(torch; only calibration imports this).

With ``scheduler.readback_skip`` off a decode row reads its exit signal back on every loop,
used or not; with it on the runner skips the unused one. The term is measured on the same
decode-only RECURRENT batch executed whole (``runner.execute``) both ways, back to back in a
new seeded order per round: once with no row needing its signal (skip on) and once with every
decode row needing it (skip off). Executed whole, the difference holds the gate over the rows,
the device-to-host copy, the host's wait for the device to drain before it, and, on a GPU
(timed with events around the whole call), the launches the host could not queue ahead while
it waited: the lost overlap. On a one-thread CPU it is timed in thread CPU time, as the other
extras are.

Per row count the median of the paired differences is one estimate; the term is their median,
clamped at 0 (the gate's cost grows little with the rows next to the sync).
"""

from __future__ import annotations

import functools
import random
import statistics

from loopserve.calibrate.adaptive_costs import SIGNAL_CONTEXT, _time, with_signals, without_signals
from loopserve.calibrate.measure import CalibrationRig, StepTimer, warm_up
from sim.cost.shape_grid import DecodeRow, Shape

READBACK_ROWS = (1, 4, 16)
QUICK_READBACK_ROWS = (1, 4)
# Paired differences of two whole steps are noisy next to a few microseconds of readback;
# a decode step is short, so many rounds cost little.
READBACK_ROUNDS = 50
QUICK_READBACK_ROUNDS = 20
PAIRS_PER_BUILD = 4


def readback_rounds(quick: bool = False) -> int:
    """Rounds of paired timings per shape."""
    return QUICK_READBACK_ROUNDS if quick else READBACK_ROUNDS


def readback_shapes(num_depths: int, quick: bool = False) -> list[Shape]:
    """The decode-only shapes the readback term is measured on."""
    rows = QUICK_READBACK_ROWS if quick else READBACK_ROWS
    return [Shape("decode", decode=tuple(DecodeRow(SIGNAL_CONTEXT, i % num_depths)
                                         for i in range(n))) for n in rows]


def measure_readback(rig: CalibrationRig, shapes: list[Shape], *, rounds: int,
                     seed: int = 0) -> tuple[float, list[float]]:
    """``(readback_s, per-shape medians)``: the per-readback extra of a recurrent step,
    as the median over shapes of each shape's median paired difference (off minus on)."""
    timer = StepTimer(rig.runner.device)
    diffs: list[list[float]] = [[] for _ in shapes]
    rng = random.Random(seed)
    for s in shapes:  # warm both variants once per shape before any timing
        base, live = rig.build(s)
        try:
            warm_up(functools.partial(rig.runner.execute, without_signals(base)))
            warm_up(functools.partial(rig.runner.execute, with_signals(base)))
        finally:
            rig.release(live)
    for _ in range(rounds):
        order = list(range(len(shapes)))
        rng.shuffle(order)
        for i in order:
            base, live = rig.build(shapes[i])
            try:
                off, on = with_signals(base), without_signals(base)
                for _ in range(PAIRS_PER_BUILD):
                    first_off = rng.random() < 0.5  # which runs first changes each time
                    pair = (off, on) if first_off else (on, off)
                    t = [_time(timer, functools.partial(rig.runner.execute, b)) for b in pair]
                    diffs[i].append(t[0] - t[1] if first_off else t[1] - t[0])
            finally:
                rig.release(live)
    medians = [statistics.median(d) for d in diffs]
    return max(0.0, statistics.median(medians)), medians
