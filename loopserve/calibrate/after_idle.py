"""How much slower a step runs after the engine sat idle (torch; only calibration imports this).

The forced shapes of ``loopserve.calibrate.measure`` run back to back, warm. In serving, an
arrival that finds the engine idle starts a step after a wait, and on a shared CPU that step
runs slower than warm (``sim.cost.after_idle``; docs/fidelity.md, "Measured"). Here each probe
shape (a prompt chunk, an atomic prefill, a decode step) is timed warm and after each
``pauses`` wait, the waits visited in a new seeded order per round and spent as the real loop
spends them (``engine.realtime.sleep_until``). Per shape's step kind and wait, the extra is
median time after the wait / median warm time - 1, floored at 0. The three runs after it,
back to back, give ``later``: their extra as a share of the first one's.
"""

from __future__ import annotations

import functools
import random
import statistics
import time

from engine.realtime import sleep_until
from loopserve.calibrate.measure import CalibrationRig, StepTimer, warm_up
from loopserve.calibrate.result import IdleMeasurement
from sim.cost.after_idle import AfterIdle
from sim.cost.shape_grid import DecodeRow, PromptChunk, Shape

PAUSES_S = (0.005, 0.02, 0.05, 0.2, 0.5)
QUICK_PAUSES_S = (0.02, 0.2)
# The runs after the first that are timed back to back after a wait (``AfterIdle.later``),
# each as a share of the first one's extra, over the waits and shapes where that is large
# enough to divide by.
LATER_STEPS = 3
SHARE_FROM_S, SHARE_MIN_EXTRA = 0.05, 0.05


def idle_seconds(pauses_s: tuple[float, ...], rounds: int) -> float:
    """The time ``measure_after_idle`` spends waiting (its steps come on top)."""
    return len(idle_shapes(1)) * rounds * sum(pauses_s)


def idle_shapes(num_depths: int) -> dict[str, Shape]:
    """The steps timed after a wait: what an arrival's first step is in each arm (a prompt
    chunk, an atomic prefill), and a decode step."""
    return {
        "prompt": Shape("prompt", prompts=(PromptChunk(0, 64, 0),)),
        "prefill": Shape("prefill", prompts=(PromptChunk(0, 64, 0),), num_depths=num_depths),
        "decode": Shape("decode", decode=tuple(DecodeRow(128, i % num_depths) for i in range(8))),
    }


def measure_after_idle(rig: CalibrationRig, *, pauses_s: tuple[float, ...] = PAUSES_S,
                       rounds: int = 9, seed: int = 0) -> IdleMeasurement:
    """Time each of ``idle_shapes`` warm, and after each wait the first ``1 + LATER_STEPS``
    runs back to back, ``rounds`` times each."""
    timer = StepTimer(rig.runner.device)
    rng = random.Random(seed)
    ratios: dict[str, list[float]] = {}
    shares: list[list[float]] = [[] for _ in range(LATER_STEPS)]
    for name, shape in idle_shapes(rig.num_depths).items():
        batch, live = rig.build(shape)
        try:
            run = functools.partial(rig.runner.execute, batch)
            warm_up(run)
            times: dict[float, list[list[float]]] = {p: [] for p in (0.0, *pauses_s)}
            for _ in range(rounds):
                order = list(times)
                rng.shuffle(order)
                for pause in order:
                    if pause > 0:
                        sleep_until(time.perf_counter() + pause)
                        times[pause].append([timer(run)[0] for _ in range(1 + LATER_STEPS)])
                    else:  # warm: right after a like step, as the forced shapes are timed
                        run()
                        times[pause].append([timer(run)[0]])
        finally:
            rig.release(live)
        warm = statistics.median(t[0] for t in times[0.0])
        ratios[name] = [statistics.median(t[0] for t in times[p]) / warm for p in pauses_s]
        for p, ratio in zip(pauses_s, ratios[name], strict=True):
            first = ratio - 1.0
            if p >= SHARE_FROM_S and first >= SHARE_MIN_EXTRA:
                for k in range(LATER_STEPS):
                    shares[k].append((statistics.median(t[k + 1] for t in times[p]) / warm - 1.0)
                                     / first)
    extra = {name: [round(max(0.0, r - 1.0), 4) for r in rs] for name, rs in ratios.items()}
    later = [round(max(0.0, statistics.median(v)), 4) for v in shares] if shares[0] else []
    return IdleMeasurement(AfterIdle(idle_s=list(pauses_s), extra=extra, later=later), ratios)
