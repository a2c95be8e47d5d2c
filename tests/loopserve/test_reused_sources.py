"""The arms of one point and repeat share one stateless arrival source (``reused_sources``):
the same object within a repeat, a new one per repeat, a stateful source built per run, and
results equal to runs that build their own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopserve.plan import plan_runs
from loopserve.runs import loop
from loopserve.runs.loop import execute, reused_sources, run_checked, sim_target
from loopserve.schema import load_scenario
from tests.scenario_fixtures import tiny, write_scenario

POISSON = {"kind": "poisson", "num_requests": 6, "request_rate": 50.0,
           "prompt_tokens": {"dist": "uniform", "low": 4, "high": 12},
           "output_tokens": {"dist": "uniform", "low": 2, "high": 6}}


def _plan(tmp_path: Path) -> Any:
    return plan_runs(load_scenario(write_scenario(tmp_path, tiny(workload=POISSON,
                                                                 repeats=2))), "sim")


def test_arms_of_a_repeat_share_one_source_and_match_fresh_runs(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    by_id = {p.point_id: p for p in plan.points}
    assert len(plan.scenario.arms) > 1
    source = reused_sources(plan)
    got = [source(by_id[s.point_id], s) for s in plan.runs]
    for spec, src in zip(plan.runs, got, strict=True):
        same = [g for s, g in zip(plan.runs, got, strict=True) if s.seed == spec.seed]
        assert all(g is src for g in same)
    assert len({id(g) for g in got}) == plan.scenario.repeats
    target = sim_target(plan)
    fresh = [run_checked(plan, target, by_id[s.point_id], s) for s in plan.runs]
    shared = execute(plan, progress=False)
    assert [json.dumps(r.metrics, sort_keys=True) for r in shared] == \
        [json.dumps(r.metrics, sort_keys=True) for r in fresh]
    assert [list(r.records.tokens.time_s) for r in shared] == \
        [list(r.records.tokens.time_s) for r in fresh]


def test_a_stateful_source_is_built_per_run(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan(tmp_path)
    monkeypatch.setattr(loop, "run_source", lambda *_: object())
    source = reused_sources(plan)
    point, spec = plan.points[0], plan.runs[0]
    assert source(point, spec) is not source(point, spec)
