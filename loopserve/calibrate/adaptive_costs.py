"""The costs only adaptive exits add to a step (torch; only calibration imports this).

A fixed-exit step never computes an exit signal and never carries finalize copies, and the
forced shapes of ``loopserve.calibrate.measure`` have neither, so the stage models leave
both out. With ``ouro`` exits nearly every decode call computes the gate of its rows and
reads it back, and the step after a token exits (a CODA, mostly) first copies the token's
KV into the deeper planes it skipped. Both are measured here, on a one-thread CPU in thread
CPU time (a neighbour's preemption would swamp a tenth of a millisecond), on a GPU with
events:

- ``finalize``: ``runner.release`` of the housekeeping alone (what ``execute`` runs first),
  for CODA rows whose tokens exited after one loop, copying into one or D-1 planes;
- ``signals``: the runner's signal computation for a decode call's rows alone (the gate
  over their output rows, one readback), for 1 to 16 rows.

Each case's median over rounds (visited in a new seeded order per round, as the shapes are)
is one sample; the profile's ``signals`` and ``finalize`` models are fitted on them
(``sim.cost.profile``).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

from engine.core.batch import Batch, FinalizeOp, Housekeeping, ItemKind, ScheduledItem
from loopserve.calibrate.measure import CalibrationRig, StepTimer
from sim.cost.features import batch_features
from sim.cost.fit import Sample
from sim.cost.shape_grid import DecodeRow, Shape

SIGNAL_ROWS = (1, 2, 4, 8, 16)
SIGNAL_CONTEXT = 64
FINALIZE_ROWS = (1, 2, 4, 8, 16)
# A base batch and the same batch with the extra: built together, freed together.
Variant = Callable[[Batch], Batch]


def with_signals(batch: Batch, needs_signal: bool = True) -> Batch:
    """``batch`` with every decode row computing and reading back its gate, or (with
    ``needs_signal`` false, ``readback_skip`` on) none of them."""
    items = tuple(
        ScheduledItem(it.request_id, it.generation, it.kind, it.position, it.num_tokens,
                      it.depth, it.num_depths, needs_signal=needs_signal)
        if it.kind is ItemKind.DECODE else it for it in batch.items)
    return Batch(batch.step, batch.stage, items, batch.housekeeping)


def without_signals(batch: Batch) -> Batch:
    """``batch`` with no decode row reading its signal back (``readback_skip`` on)."""
    return with_signals(batch, False)


def with_finalize(to_planes: int) -> Variant:
    """A variant whose housekeeping copies each row's last written position from depth 0
    into ``to_planes`` deeper planes (a token that exited after its first loop)."""
    def variant(batch: Batch) -> Batch:
        ops = tuple(FinalizeOp(it.request_id, it.generation, it.position - 1, 0,
                               tuple(range(1, 1 + to_planes))) for it in batch.items)
        return Batch(batch.step, batch.stage, batch.items, Housekeeping(finalize=ops))
    return variant


def extra_cases(num_depths: int, quick: bool = False) -> list[tuple[str, Shape, Variant]]:
    """(kind, base shape, variant) of every pair calibration times."""
    rows_s, rows_f = ((1, 4), (1, 4)) if quick else (SIGNAL_ROWS, FINALIZE_ROWS)
    cases: list[tuple[str, Shape, Variant]] = [
        ("signals", Shape("decode", decode=tuple(DecodeRow(SIGNAL_CONTEXT, i % num_depths)
                                                 for i in range(n))), with_signals)
        for n in rows_s]
    planes = sorted({1, num_depths - 1}) if num_depths > 1 else []
    cases += [("finalize", Shape("coda", rows=n), with_finalize(p))
              for n in rows_f for p in planes]
    return cases


def _time(timer: StepTimer, fn: Callable[[], object]) -> float:
    """Seconds of ``fn``: the GPU's (events), the calling thread's CPU time when torch runs
    on that one thread, else wall time."""
    if timer.cuda or not timer.check:
        return timer(fn)[0]
    c0 = time.thread_time()
    fn()
    return time.thread_time() - c0


def _finalize_s(rig: CalibrationRig, timer: StepTimer, batch: Batch) -> float:
    """The batch's housekeeping applied alone (once untimed: the copies are idempotent)."""
    rig.runner.release(batch.housekeeping)
    return _time(timer, lambda: rig.runner.release(batch.housekeeping))


def _signals_s(rig: CalibrationRig, timer: StepTimer, batch: Batch) -> float:
    """The runner's own signal computation for the batch's decode rows (the gate over their
    output rows and one readback), timed alone: as a difference of two whole decode calls it
    would drown in their noise. Private on purpose: the timed code is the serving code."""
    runner = rig.runner
    pairs = [(it, it.depth) for it in batch.items]
    y = runner.decode_states.hidden[:len(pairs)]  # rows of the model's width and dtype

    def signals() -> None:
        runner._signals(pairs, y, len(pairs))  # noqa: SLF001

    signals()
    return _time(timer, signals)


def measure_extras(rig: CalibrationRig, cases: list[tuple[str, Shape, Variant]], *,
                   rounds: int, seed: int = 0) -> list[Sample]:
    """One sample per case: its median over ``rounds`` (at least 1 ns: a fit needs positive
    times), with the variant's features."""
    timer = StepTimer(rig.runner.device)
    features = []
    for _, shape, variant in cases:  # one build per case for its features; freed at once
        base, live = rig.build(shape)
        features.append(batch_features(variant(base)))
        rig.release(live)
    times: list[list[float]] = [[] for _ in cases]
    rng = random.Random(seed)
    for _ in range(rounds):
        order = list(range(len(cases)))
        rng.shuffle(order)
        for i in order:
            kind, shape, variant = cases[i]
            base, live = rig.build(shape)
            extra = variant(base)
            try:
                times[i].append(_finalize_s(rig, timer, extra) if kind == "finalize"
                                else _signals_s(rig, timer, extra))
            finally:
                rig.release(live)
    return [Sample(kind, f, max(1e-9, statistics.median(t)), False, f"{kind} {shape.label}")
            for (kind, shape, _), f, t in zip(cases, features, times, strict=True)]
