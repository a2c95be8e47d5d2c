"""Repeats as independent replications: repeat r runs on its own seed from (seed, r), the same
for every arm of the repeat (arms paired), and every median in summary.json carries its
spread (min-max; a 95% bootstrap interval of the median from 5 repeats)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from loopserve.plan import plan_runs
from loopserve.plan.sweep import repeat_seed
from loopserve.runs.loop import execute
from loopserve.schema import load_scenario
from loopserve.stats import spreads
from loopserve.stats.summary import build_summary, median_rows
from tests.scenario_fixtures import tiny, write_scenario

POISSON = {"kind": "poisson", "num_requests": 6, "request_rate": 50.0,
           "prompt_tokens": {"dist": "uniform", "low": 4, "high": 12},
           "output_tokens": {"dist": "uniform", "low": 2, "high": 6}}


def test_repeat_seeds_come_from_seed_and_repeat() -> None:
    assert repeat_seed(7, 0) == 7  # a one-repeat run is the scenario seed's run
    seeds = {(s, r): repeat_seed(s, r) for s in range(4) for r in range(4)}
    assert len(set(seeds.values())) == 16  # no (seed, repeat) pair shares another's draws
    assert repeat_seed(0, 1) != repeat_seed(1, 0)
    assert repeat_seed(3, 2) == repeat_seed(3, 2) and 0 <= repeat_seed(3, 2) < 2 ** 63


def _poisson_run(tmp_path: Path, repeats: int) -> tuple[Any, Any]:
    scn = load_scenario(write_scenario(tmp_path, tiny(workload=POISSON, repeats=repeats)))
    plan = plan_runs(scn, "sim")
    return plan, execute(plan, progress=False)


def test_arms_are_paired_within_a_repeat_and_repeats_differ(tmp_path: Path) -> None:
    plan, results = _poisson_run(tmp_path, 3)
    arrivals: dict[tuple[int, str], list[tuple[str, float, int]]] = {}
    for r in results:
        arrivals[r.spec.repeat, r.spec.arm] = sorted(
            (q.request_id, q.arrival_s, q.prompt_tokens) for q in r.records.requests)
    for repeat in range(3):
        same = {tuple(arrivals[repeat, arm]) for arm in plan.scenario.arms}
        assert len(same) == 1, f"arms of repeat {repeat} saw different workloads"
    per_repeat = {tuple(arrivals[repeat, "atomic"]) for repeat in range(3)}
    assert len(per_repeat) == 3  # each repeat drew its own arrivals and lengths
    e2el = [r.metrics["e2el_ms"]["mean"] for r in results if r.spec.arm == "mixed"]
    assert len(set(e2el)) == 3  # so the repeats' metrics differ too


def test_spread_min_max_and_interval_from_five_repeats() -> None:
    few, same, none_col = spreads([[3.0, 1.0, 2.0], [4, 4, 4, 4, 4, 4], [None, None]])
    assert few == {"min": 1.0, "max": 3.0, "ci95_low": None, "ci95_high": None}
    assert same == {"min": 4, "max": 4, "ci95_low": 4.0, "ci95_high": 4.0}
    assert none_col == {"min": None, "max": None, "ci95_low": None, "ci95_high": None}
    values = [10.0, 11.0, 12.0, 13.0, 30.0, None]
    (s,) = spreads([values])
    assert (s["min"], s["max"]) == (10.0, 30.0)  # None left out
    assert s["ci95_low"] is not None and s["ci95_high"] is not None
    assert 10.0 <= s["ci95_low"] <= 12.0 <= s["ci95_high"] <= 30.0
    assert spreads([values]) == [s]  # seeded: the same values, the same interval


def test_median_rows_carry_spreads_with_the_metrics_keys() -> None:
    def row(repeat: int, itl: float) -> dict[str, Any]:
        return {"arm": "mixed", "target": "sim", "point_id": 0, "repeat": repeat,
                "valid": True, "invalid_reason": None, "itl_ms": {"p99": itl, "max": None},
                "num_requests": 3, "wall_s": None}

    values = [5.0, 1.0, 9.0, 4.0, 2.0, 8.0, 3.0, 7.0, 6.0]
    (m,) = median_rows([row(i, v) for i, v in enumerate(values)], ["mixed"])
    assert m["itl_ms"]["p99"] == 5.0
    sp = m["spread"]
    assert set(sp) == {"itl_ms", "num_requests", "wall_s"}
    assert (sp["itl_ms"]["p99"]["min"], sp["itl_ms"]["p99"]["max"]) == (1.0, 9.0)
    low, high = sp["itl_ms"]["p99"]["ci95_low"], sp["itl_ms"]["p99"]["ci95_high"]
    # the percentile bootstrap of the median, 10,000 resamples from default_rng(0): with 9
    # repeats the interval is narrower than their range
    idx = np.random.default_rng(0).integers(0, 9, size=(10_000, 9))
    boot = np.median(np.asarray(values)[idx], axis=1)
    assert (low, high) == tuple(np.percentile(boot, [2.5, 97.5]))
    assert 1.0 < low < 5.0 < high < 9.0
    assert sp["itl_ms"]["max"]["min"] is None and sp["num_requests"]["max"] == 3


def test_summary_spreads_mirror_every_median(tmp_path: Path) -> None:
    plan, results = _poisson_run(tmp_path, 5)
    summary = build_summary(plan, results)
    assert "bootstrap" in summary["spread_method"]
    for m in summary["medians"]:
        for key, value in m.items():
            if isinstance(value, dict) and key != "spread":
                assert set(m["spread"][key]) == set(value), key
                for sub, med in value.items():
                    s = m["spread"][key][sub]
                    if med is not None:
                        assert s["min"] <= med <= s["max"]
                        assert s["ci95_low"] is not None
                        assert s["min"] <= s["ci95_low"] <= s["ci95_high"] <= s["max"]
    again = build_summary(plan, execute(plan_runs(plan.scenario, "sim"), progress=False))
    assert again == summary
