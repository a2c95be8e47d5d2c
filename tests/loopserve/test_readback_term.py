"""The calibration's readback term times what it says: the same decode batch executed whole
reads every row's signal back with ``readback_skip`` off and nothing with it on (timing two
identical steps is the bug this guards against), and the term it returns is finite and
non-negative."""

from __future__ import annotations

import math

import pytest

from engine.core.results import RecurrentResult
from engine.core.shapes import TINY
from engine.llm import build_runner
from loopserve.calibrate.adaptive_costs import with_signals, without_signals
from loopserve.calibrate.measure import CalibrationRig, config_for
from loopserve.calibrate.readback import measure_readback, readback_shapes


@pytest.fixture(scope="module")
def rig() -> CalibrationRig:
    shapes = readback_shapes(TINY.num_depths, quick=True)
    cfg = config_for(TINY, shapes)
    return CalibrationRig(build_runner("tiny", cfg), cfg)


def test_skip_off_reads_every_rows_signal_back_and_skip_on_none(rig: CalibrationRig) -> None:
    shape = readback_shapes(TINY.num_depths, quick=True)[-1]
    base, live = rig.build(shape)
    try:
        off = rig.runner.execute(with_signals(base))
        off_reads = rig.runner.readbacks.last_step
        on = rig.runner.execute(without_signals(base))
        on_reads = rig.runner.readbacks.last_step
    finally:
        rig.release(live)
    assert isinstance(off, RecurrentResult) and isinstance(on, RecurrentResult)
    assert off.decode_signals is not None and len(off.decode_signals) == len(shape.decode)
    assert all(not math.isnan(s) for s in off.decode_signals)
    assert on.decode_signals is None or all(math.isnan(s) for s in on.decode_signals)
    assert (off_reads, on_reads) == (1, 0)


def test_the_term_is_finite_and_non_negative(rig: CalibrationRig) -> None:
    shapes = readback_shapes(TINY.num_depths, quick=True)
    readback_s, per_shape = measure_readback(rig, shapes, rounds=3)
    assert len(per_shape) == len(shapes) and all(math.isfinite(t) for t in per_shape)
    assert math.isfinite(readback_s) and readback_s >= 0
