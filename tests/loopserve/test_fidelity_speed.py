"""fidelity.json's ``at_run_speed``: the factor is the measured runs' step time over the
profile's prediction, and the simulation with the profile scaled by it runs the same batches
at that factor (a closed workload's timeline scales exactly)."""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path

import pytest

from loopserve.fidelity.machine import scaled_profile
from sim.cost.base import StepContext
from sim.cost.calibrated import CalibratedCost
from sim.cost.profile import load_profile
from tests.loopserve.test_fidelity import files, profile, result  # noqa: F401  (fixtures)


def test_the_factor_is_measured_over_predicted_step_time(result: Path) -> None:  # noqa: F811
    doc = json.loads((result / "fidelity.json").read_text())
    with (result / "steps.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["world"] == "measured"]
    meas = sum(float(r["end_s"]) - float(r["start_s"]) for r in rows)
    pred = sum(float(r["predicted_s"]) for r in rows)
    assert doc["at_run_speed"]["step_time_ratio"] == pytest.approx(meas / pred, rel=1e-9)


def test_the_scaled_simulation_is_the_same_timeline_times_the_factor(
        result: Path) -> None:  # noqa: F811
    doc = json.loads((result / "fidelity.json").read_text())
    speed = doc["at_run_speed"]
    factor = speed["step_time_ratio"]
    assert factor is not None and factor != pytest.approx(1.0, abs=1e-3)
    for arm, metrics in doc["arms"].items():
        for name in ("itl_p50_ms", "ttft_p50_ms", "tpot_mean_ms"):
            assert speed["arms"][arm][name]["sim"] == pytest.approx(
                factor * metrics[name]["sim"], rel=1e-6), (arm, name)
            assert speed["arms"][arm][name]["measured"] == metrics[name]["measured"]


def test_every_cost_term_scales(result: Path) -> None:  # noqa: F811
    from loopserve.fidelity.world import run_sim
    from loopserve.plan import plan_runs
    from loopserve.schema import load_scenario

    prof = load_profile(profile())
    plan = plan_runs(load_scenario(result / "scenario.yaml", []), "sim")
    batches = run_sim(plan, progress=False)[0].batches
    base, scaled = CalibratedCost(prof), CalibratedCost(scaled_profile(prof, 1.7))
    for prev, b in zip([None, *batches], batches, strict=False):
        ctx = StepContext(b, prev)
        assert scaled.execute_time(ctx) == pytest.approx(1.7 * base.execute_time(ctx))
        assert scaled.gap_time(b) == pytest.approx(1.7 * base.gap_time(b))


def test_the_report_shows_the_errors_at_run_speed(result: Path) -> None:  # noqa: F811
    doc = json.loads((result / "fidelity.json").read_text())
    page = html.unescape((result / "report.html").read_text())
    ratio = doc["at_run_speed"]["step_time_ratio"]
    assert f"error at the runs' own speed (profile x{ratio:.3f}; diagnostic)" in page
    err = doc["at_run_speed"]["arms"]["mixed"]["itl_p50_ms"]["rel_error"]
    assert f"<td>{100 * err:+.1f}%</td></tr>" in page
