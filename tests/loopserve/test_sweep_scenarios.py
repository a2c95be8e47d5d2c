"""RFC §6 sweeps over prompt length and exit threshold: the shipped scenarios vary what they
say, and on real targets each point is the median of three interleaved runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loopserve.errors import UserError
from loopserve.plan import plan_runs
from loopserve.schema import load_scenario, set_path

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_set_path_indexes_lists() -> None:
    data: dict[str, Any] = {"workload": {"inject": [{"prompt_tokens": 1}, {"prompt_tokens": 2}]}}
    set_path(data, "workload.inject.1.prompt_tokens", 7)
    assert data["workload"]["inject"] == [{"prompt_tokens": 1}, {"prompt_tokens": 7}]
    with pytest.raises(UserError) as err:
        set_path(data, "workload.inject.2.prompt_tokens", 7)
    assert err.value.field == "workload.inject.2.prompt_tokens"


@pytest.mark.parametrize("name,lengths", [
    ("sweep-prompt-length", [512, 1024, 2048, 4096]),
    ("sweep-prompt-length-cpu-short", [64, 128, 256]),
])
def test_prompt_length_sweeps_vary_the_injected_prompts(name: str, lengths: list[int]) -> None:
    plan = plan_runs(load_scenario(SCENARIOS / f"{name}.yaml"), "sim")
    got = [[inj.prompt_tokens for inj in p.scenario.workload.inject] for p in plan.points]
    assert got == [[n, n] for n in lengths]


@pytest.mark.parametrize("name,thresholds", [
    ("sweep-exit-threshold", [0.5, 0.7, 0.9, 1.0]),
    ("sweep-exit-threshold-cpu-short", [0.6, 0.8, 1.0]),
])
def test_exit_threshold_sweeps(name: str, thresholds: list[float]) -> None:
    plan = plan_runs(load_scenario(SCENARIOS / f"{name}.yaml"), "sim")
    assert [p.scenario.exit.exit_threshold for p in plan.points] == thresholds
    for run in plan.runs:  # A0 reads the signal back, A1/A2 skip the unused ones
        assert run.cfg.scheduler.readback_skip == (run.arm != "atomic")


@pytest.mark.parametrize("name", ["sweep-prompt-length-cpu-short",
                                  "sweep-exit-threshold-cpu-short"])
def test_cpu_sweeps_interleave_three_repeats_per_point(name: str) -> None:
    plan = plan_runs(load_scenario(SCENARIOS / f"{name}.yaml"), "sim")
    for point in plan.points:
        order = [(r.repeat, r.arm) for r in plan.runs if r.point_id == point.point_id]
        assert order == [(k, a) for k in range(3) for a in ("atomic", "per_depth", "mixed")]
