"""Calibration times a shape warm, as serving runs it (loopserve.calibrate.measure): each visit
runs the shape untimed (after its predecessor, for CODA and PRELUDE) before the timed run,
at least once and at most WARMUP_RUNS times, and the timed run also follows its predecessor."""

from __future__ import annotations

import pytest

from engine.core import Batch, Stage
from engine.core.shapes import TINY
from engine.llm import build_runner
from loopserve.calibrate import measure
from loopserve.calibrate.measure import CalibrationRig, config_for, measure_shapes
from sim.cost.shape_grid import DecodeRow, Shape

SHAPES = [Shape("decode", decode=(DecodeRow(32, 1), DecodeRow(48, 0))), Shape("coda", rows=2)]


@pytest.fixture(scope="module")
def rig() -> CalibrationRig:
    cfg = config_for(TINY, SHAPES)
    return CalibrationRig(build_runner("tiny", cfg), cfg)


def _record(rig: CalibrationRig, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The stage of every execute, with TIMED where a timed run begins."""
    log: list[str] = []
    real_execute, real_timer = rig.runner.execute, measure.StepTimer.__call__

    def execute(batch: Batch) -> object:
        log.append("coda" if batch.stage is Stage.CODA else "decode")
        return real_execute(batch)

    def timed(self: measure.StepTimer, fn: object) -> tuple[float, bool]:
        log.append("TIMED")
        return real_timer(self, fn)  # type: ignore[arg-type]

    monkeypatch.setattr(rig.runner, "execute", execute)
    monkeypatch.setattr(measure.StepTimer, "__call__", timed)
    return log


@pytest.mark.parametrize("warmup_s", [0.0, 60.0])
def test_every_timed_run_follows_warm_up_runs_of_its_own_shape(
    rig: CalibrationRig, monkeypatch: pytest.MonkeyPatch, warmup_s: float
) -> None:
    monkeypatch.setattr(measure, "WARMUP_S", warmup_s)
    log = _record(rig, monkeypatch)
    got = measure_shapes(rig, SHAPES, repeats=1, progress=False)
    assert all(len(m.times_s) + len(m.contended) == 1 for m in got)
    visits = " ".join(log).split("TIMED")
    runs = [v.split() for v in visits[:-1]]
    after = [v.split() for v in visits[1:]]  # the timed call itself opens each next piece
    warm = 1 if warmup_s == 0.0 else measure.WARMUP_RUNS  # a time limit of 0 stops after one
    for before, timed in zip(runs, after, strict=True):
        kind = timed[0]
        if kind == "decode":  # a decode call is its own predecessor
            assert before[-warm:] == ["decode"] * warm
        else:  # CODA: (its rows' last-depth decode, CODA) per warm-up, then the decode again
            assert before[-(2 * warm + 1):] == ["decode", "coda"] * warm + ["decode"]
