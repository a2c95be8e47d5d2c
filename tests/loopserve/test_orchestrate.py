"""Run orchestration: point grid, interleaved run order, medians, validity, trace selection."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from loopserve.outputs.trace import select_runs, trace_events, write_trace
from loopserve.plan import plan_runs
from loopserve.plan.sweep import grid_values, reference_point, repeat_seed
from loopserve.runs.loop import execute
from loopserve.schema import load_scenario
from loopserve.stats.metrics import inter_token_latencies
from loopserve.stats.summary import build_summary, median_rows
from tests.scenario_fixtures import tiny, write_scenario


def test_points_are_variants_times_grid_in_stable_order(tmp_path: Path) -> None:
    data = tiny(
        sweep={"scheduler.prefill_chunk_size": [4, 8], "workload.decode_population": [1, 2]},
        variants={"small": {"scheduler.max_num_seqs": 3}, "big": {"scheduler.max_num_seqs": 4}},
    )
    scn = load_scenario(write_scenario(tmp_path, data))
    values = grid_values(scn)
    assert len(values) == 8
    assert values[0] == {"variant": "small", "scheduler.prefill_chunk_size": 4,
                         "workload.decode_population": 1}
    assert values[1]["workload.decode_population"] == 2  # the last key varies fastest
    assert values[2]["scheduler.prefill_chunk_size"] == 8
    assert values[4]["variant"] == "big"
    # the reference point matches the scenario's own values (chunk 8, population 2), first variant
    points = [{"point_id": i, "values": v} for i, v in enumerate(values)]
    assert reference_point(scn.model_dump(), points) == 3


def test_runs_interleave_arms_within_each_repeat(tmp_path: Path) -> None:
    scn = load_scenario(write_scenario(tmp_path, tiny(
        repeats=2, sweep={"workload.decode_population": [1, 2]})))
    plan = plan_runs(scn, "sim")
    order = [(r.point_id, r.repeat, r.arm) for r in plan.runs]
    arms = ["atomic", "per_depth", "mixed"]
    assert order == [(p, r, a) for p in (0, 1) for r in (0, 1) for a in arms]
    # repeats draw new workload seeds; arms of one repeat share them
    assert {r.seed for r in plan.runs if r.repeat == 1} == {repeat_seed(scn.seed, 1)}
    assert plan.runs[0].cfg.scheduler.arm == "atomic"


def test_medians_use_valid_repeats_and_report_invalid_ones() -> None:
    def row(repeat: int, valid: bool, itl: float, n: int) -> dict[str, Any]:
        return {"arm": "mixed", "target": "sim", "point_id": 0, "repeat": repeat,
                "valid": valid, "invalid_reason": None if valid else "no slot",
                "itl_ms": {"p99": itl}, "num_requests": n, "wall_s": None}

    rows = [row(0, True, 1.0, 3), row(1, False, 100.0, 9), row(2, True, 3.0, 4)]
    (m,) = median_rows(rows, ["atomic", "mixed"])
    assert m["itl_ms"]["p99"] == 2.0  # median of the valid 1.0 and 3.0
    assert m["num_requests"] == 3.5
    assert (m["valid"], m["num_valid"], m["num_repeats"]) == (False, 2, 3)
    assert m["invalid_reason"] == "repeat 1: no slot"
    assert m["wall_s"] is None
    (all_bad,) = median_rows([row(0, False, 5.0, 1), row(1, False, 7.0, 1)], ["mixed"])
    assert all_bad["itl_ms"]["p99"] == 6.0 and all_bad["num_requests"] == 1


def test_injected_prompt_without_a_slot_makes_the_run_invalid(tmp_path: Path) -> None:
    # 4 decoders fill max_num_seqs 4, so the injected prompt finds no free slot
    workload = dict(tiny()["workload"], decode_population=4)
    scn = load_scenario(write_scenario(tmp_path, tiny(workload=workload, repeats=1)))
    plan = plan_runs(scn, "sim")
    results = execute(plan, progress=False)
    summary = build_summary(plan, results)
    for run in summary["runs"]:
        assert run["valid"] is False
        assert "inject-0 found no free slot" in run["invalid_reason"]
    assert all(not m["valid"] for m in summary["medians"])


def test_mixed_arm_without_a_mixed_call_is_invalid(tmp_path: Path) -> None:
    # a single request never shares a core call with another request's prompt work
    workload = {"kind": "poisson", "num_requests": 1, "request_rate": 1.0,
                "prompt_tokens": 8, "output_tokens": 2}
    scn = load_scenario(write_scenario(tmp_path, tiny(workload=workload, arms=["A2"],
                                                      repeats=1)))
    plan = plan_runs(scn, "sim")
    (result,) = execute(plan, progress=False)
    assert result.invalid_reasons == ["mixed arm formed no mixed core call"]


def test_valid_runs_summary_matches_records(tmp_path: Path) -> None:
    scn = load_scenario(write_scenario(tmp_path, tiny(repeats=1)))
    plan = plan_runs(scn, "sim")
    results = execute(plan, progress=False)
    summary = build_summary(plan, results)
    assert [r["arm"] for r in summary["runs"]] == ["atomic", "per_depth", "mixed"]
    for run, res in zip(summary["runs"], results, strict=True):
        assert run["valid"] and run["invalid_reason"] is None
        assert run["num_requests"] == 3  # two decoders and one injected prompt
        assert run["num_core_calls"] == res.records.num_core_calls > 0
        assert run["wall_s"] is None  # sim: wall time lives in env.json only
    assert summary["runs"][2]["num_mixed_core_calls"] > 0
    assert summary["points"] == [{"point_id": 0, "values": {}}]


def test_trace_caps_every_run_and_records_the_cap(tmp_path: Path) -> None:
    scn = load_scenario(write_scenario(tmp_path, tiny(repeats=3)))
    plan = plan_runs(scn, "sim")
    results = execute(plan, progress=False)
    assert len(select_runs(results, {0})) == 9
    for r in results:  # the gaps kept for itl_quantiles are the records' own
        assert r.itl_s is not None and r.itl_s.size
        assert r.itl_s.tobytes() == inter_token_latencies(r.records).tobytes()
    events = trace_events(results, scn.arms, {0})
    steps = [e for e in events if e["ph"] == "X" and e.get("cat") != "ttft"]
    assert len(steps) == sum(len(r.records.steps) for r in results)
    assert {e["name"] for e in steps} >= {"decode", "prefill", "mixed", "prompt", "coda"}
    ttft = [e for e in events if e.get("cat") == "ttft"]
    assert len(ttft) == 9 and all(e["dur"] > 0 for e in ttft)
    capped = trace_events(results, scn.arms, {0}, max_steps_per_run=5)
    per_track = Counter((e["pid"], e["tid"]) for e in capped
                        if e["ph"] == "X" and e.get("cat") != "ttft")
    assert len(per_track) == 9 and set(per_track.values()) == {5}  # every repeat capped
    path = tmp_path / "trace.json.gz"
    write_trace(path, results, scn.arms, {0}, max_steps_per_run=5)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    assert doc["otherData"]["max_steps_per_run"] == 5
    assert len(doc["otherData"]["truncated_runs"]) == 9
    first = path.read_bytes()
    write_trace(path, results, scn.arms, {0}, max_steps_per_run=5)
    assert path.read_bytes() == first  # no name or mtime in the gzip header
    for cap in (5, 10_000):  # the file holds json.dumps' bytes of trace_events' document
        write_trace(path, results, scn.arms, {0}, max_steps_per_run=cap)
        text = gzip.decompress(path.read_bytes())
        doc = {"traceEvents": trace_events(results, scn.arms, {0}, cap),
               "displayTimeUnit": "ms", "otherData": json.loads(text)["otherData"]}
        assert text == (json.dumps(doc, separators=(",", ":")) + "\n").encode()


def test_unknown_target_is_a_user_error(tmp_path: Path) -> None:
    from loopserve.errors import UserError

    scn = load_scenario(write_scenario(tmp_path, tiny()))
    with pytest.raises(UserError) as err:
        plan_runs(scn, "gpu")
    assert err.value.field == "--target"


def test_cost_auto_picks_the_checked_in_profile_or_the_roofline() -> None:
    from sim.cost.calibrated import CalibratedCost
    from sim.cost.roofline import RooflineCost

    repo = Path(__file__).resolve().parents[2]
    cpu = load_scenario(repo / "scenarios" / "interference-cpu.yaml", [])
    assert cpu.cost.kind == "auto"
    assert (repo / "results" / "profiles" / "cpu-small.json").is_file()
    # the profile's model, with its measured after-idle effect composed on when it has one
    costs = [getattr(p.cost, "base", p.cost) for p in plan_runs(cpu, "sim").points]
    assert all(isinstance(c, CalibratedCost) for c in costs)
    h200 = load_scenario(repo / "scenarios" / "interference.yaml", [])
    assert not (repo / "results" / "profiles" / "h200-ouro-1.4b.json").exists()
    assert all(isinstance(p.cost, RooflineCost) for p in plan_runs(h200, "sim").points)


def test_each_run_warms_up_then_calls_back_then_runs_in_order(tmp_path: Path) -> None:
    """On a real target: one untimed warm-up (the first run's spec), the callback, then every
    planned run; a ValueError, warm-up included, becomes a UserError naming the run."""
    import dataclasses

    from loopserve.errors import UserError
    from loopserve.runs.loop import each_run

    scn = load_scenario(write_scenario(tmp_path, tiny(repeats=2)))
    plan = dataclasses.replace(plan_runs(scn, "sim"), target="cpu")  # no runner is built
    assert scn.runner.warmup
    calls: list[object] = []
    out = each_run(plan, lambda point, spec: calls.append(spec) or len(calls), progress=False,
                   after_warmup=lambda: calls.append("probes"))
    assert calls == [plan.runs[0], "probes", *plan.runs]
    assert out == list(range(3, len(plan.runs) + 3))  # warm-up result discarded

    def bad(point: object, spec: object) -> None:
        raise ValueError("workload: nope")

    with pytest.raises(UserError, match="warm-up run, arm atomic"):
        each_run(plan, bad, progress=False)
    sim = dataclasses.replace(plan, target="sim")  # no warm-up in the simulator
    calls.clear()
    each_run(sim, lambda point, spec: calls.append(spec), progress=False,
             after_warmup=lambda: calls.append("probes"))
    assert calls == ["probes", *plan.runs]
