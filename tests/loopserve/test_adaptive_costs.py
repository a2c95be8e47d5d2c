"""The costs only adaptive exits add to a step: the simulator prices a profile's ``signals``
and ``finalize`` models on the steps that have them (and nothing else changes), and the
calibration's cases really compute signals and really copy KV (timing nothing is the bug
these measurements exist to avoid)."""

from __future__ import annotations

import math

import pytest
import torch

from engine.core import Batch, ItemKind, ScheduledItem, Stage
from engine.core.batch import FinalizeOp, Housekeeping
from engine.core.results import RecurrentResult
from engine.core.shapes import TINY
from engine.llm import build_runner
from loopserve.calibrate.adaptive_costs import (
    extra_cases,
    measure_extras,
    with_finalize,
    with_signals,
)
from loopserve.calibrate.measure import CalibrationRig, config_for
from sim.cost import CalibratedCost, batch_features
from sim.cost.base import StepContext
from tests.helpers import profile_doc, stage

STAGES = {"decode": stage(3e-3, decode_rows=1e-4), "coda": stage(7e-4, rows=4e-5)}
SIGNALS = stage(2e-5, signal_rows=1e-6)
FINALIZE = stage(6e-5, finalize_copies=2e-6)


def _cost(**extras: object) -> CalibratedCost:
    doc = profile_doc("small", "cpu", STAGES)
    doc.update(extras)
    return CalibratedCost(doc)


def _decode(n: int, signal: bool) -> Batch:
    return Batch(0, Stage.RECURRENT, tuple(
        ScheduledItem(f"r{i}", 0, ItemKind.DECODE, 20, 1, depth=i % 2, needs_signal=signal)
        for i in range(n)))


def _coda(n: int, copies_each: int) -> Batch:
    items = tuple(ScheduledItem(f"r{i}", 0, ItemKind.DECODE, 20, 1, num_depths=0)
                  for i in range(n))
    ops = tuple(FinalizeOp(f"r{i}", 0, 20, 0, tuple(range(1, 1 + copies_each)))
                for i in range(n) if copies_each)
    return Batch(0, Stage.CODA, items, Housekeeping(finalize=ops))


def test_signal_rows_counts_the_decode_rows_that_read_a_signal() -> None:
    assert batch_features(_decode(3, True))["signal_rows"] == 3
    assert batch_features(_decode(3, False))["signal_rows"] == 0
    assert batch_features(_coda(2, 3))["finalize_copies"] == 6


def test_the_extras_are_priced_on_the_steps_that_have_them() -> None:
    plain, both = _cost(), _cost(signals=SIGNALS, finalize=FINALIZE)
    for batch in (_decode(4, False), _coda(3, 0)):
        assert both.execute_time(StepContext(batch)) == plain.execute_time(StepContext(batch))
    assert both.execute_time(StepContext(_decode(4, True))) == pytest.approx(
        plain.execute_time(StepContext(_decode(4, True))) + 2e-5 + 4e-6)
    assert both.execute_time(StepContext(_coda(3, 2))) == pytest.approx(
        plain.execute_time(StepContext(_coda(3, 2))) + 6e-5 + 6 * 2e-6)
    assert both.step_time(StepContext(_coda(3, 2))) == pytest.approx(
        both.execute_time(StepContext(_coda(3, 2))))
    terms = both.breakdown(_decode(4, True))
    assert terms["signals_s"] == pytest.approx(2e-5 + 4e-6)
    assert sum(v for k, v in terms.items() if k != "total_s") == pytest.approx(terms["total_s"])


def test_a_profile_without_extras_prices_as_before() -> None:
    """Profiles calibrated before the extras existed keep loading and predicting the same."""
    cost = _cost()
    assert (cost.execute_time(StepContext(_coda(3, 2)))
            == cost.execute_time(StepContext(_coda(3, 0))))
    assert (cost.execute_time(StepContext(_decode(4, True)))
            == cost.execute_time(StepContext(_decode(4, False))))


@pytest.fixture(scope="module")
def rig() -> CalibrationRig:
    cases = extra_cases(TINY.num_depths, quick=True)
    cfg = config_for(TINY, [shape for _, shape, _ in cases])
    return CalibrationRig(build_runner("tiny", cfg), cfg)


def test_the_signal_case_computes_every_rows_signal(rig: CalibrationRig) -> None:
    shape = next(s for k, s, _ in extra_cases(TINY.num_depths, quick=True) if k == "signals"
                 and len(s.decode) == 4)
    base, live = rig.build(shape)
    try:
        result = rig.runner.execute(with_signals(base))
    finally:
        rig.release(live)
    assert isinstance(result, RecurrentResult) and result.decode_signals is not None
    assert len(result.decode_signals) == 4
    assert all(0.0 <= s <= 1.0 and not math.isnan(s) for s in result.decode_signals)


def test_the_finalize_case_copies_kv_into_the_deeper_planes(rig: CalibrationRig) -> None:
    D = TINY.num_depths
    base, live = rig.build(next(s for k, s, _ in extra_cases(D, quick=True) if k == "finalize"))
    batch = with_finalize(D - 1)(base)
    kv, cache = rig.kv, rig.runner.kv_cache
    op = batch.housekeeping.finalize[0]
    key = (op.request_id, op.generation)
    slots = [cache.slot(kv.block_table(key, d), op.position) for d in range(D)]
    layer = cache.k[0].view(-1, *cache.k[0].shape[2:])
    try:
        with torch.no_grad():
            layer[slots[0]] = 1.5
            for s in slots[1:]:
                layer[s] = 0.0
        assert batch_features(batch)["finalize_copies"] == len(base.items) * (D - 1)
        rig.runner.release(batch.housekeeping)
        assert all(torch.equal(layer[s], layer[slots[0]]) for s in slots[1:])
    finally:
        rig.release(live)


def test_measure_extras_gives_one_positive_sample_per_case(rig: CalibrationRig) -> None:
    cases = extra_cases(TINY.num_depths, quick=True)
    samples = measure_extras(rig, cases, rounds=2)
    assert [s.kind for s in samples] == [k for k, _, _ in cases]
    assert all(s.seconds > 0 for s in samples)
    assert {s.features["signal_rows"] for s in samples if s.kind == "signals"} == {1, 4}
    assert not rig.core.requests  # everything released
