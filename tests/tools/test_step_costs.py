"""``python -m tools.step_costs``: its loop is the driver's (the same steps, to the bit) and
its table accounts for every step it timed (no speed is asserted here)."""

from __future__ import annotations

from collections import Counter

import pytest

from loopserve.workloads import build_source
from sim import simulate
from tools import step_costs
from tools.bench import bench_engine, workload


@pytest.mark.parametrize("arm", ["atomic", "per_depth", "mixed", "wavefront"])
@pytest.mark.parametrize("request_rate", [20.0, 0.5])  # 0.5: the engine idles between arrivals
def test_its_steps_are_the_simulators(arm: str, request_rate: float) -> None:
    spec = {**workload(30, 0), "request_rate": request_rate}
    records, costs = step_costs.run_arm(arm, spec, seed=3)
    cfg, cost = bench_engine(arm)
    vocab_size = cfg.model.vocab_size
    expected = simulate(cfg, build_source(spec, seed=3, vocab_size=vocab_size), cost, seed=3,
                        vocab_size=vocab_size)
    assert records.steps == expected.steps
    assert records.tokens == expected.tokens
    assert records.requests == expected.requests
    kinds = Counter(s.kind for s in expected.steps)
    assert {k: len(c.items) for k, c in costs.items()} == dict(kinds)
    for kind, c in costs.items():
        assert all(len(p) == kinds[kind] for p in c.phase_ns)
        assert list(c.items) == [s.num_decode_items + s.num_prompt_items
                                 for s in expected.steps if s.kind == kind]


def test_without_step_rows_it_counts_them_as_a_probe_does() -> None:
    spec = workload(30, 0)
    records, costs = step_costs.run_arm("wavefront", spec, seed=1, record_steps=False)
    full, _ = step_costs.run_arm("wavefront", spec, seed=1)
    assert len(records.steps) == 0 and records.num_core_calls == full.num_core_calls > 0
    assert records.tokens == full.tokens
    assert sum(len(c.items) for c in costs.values()) == len(full.steps)


def test_the_table_accounts_for_every_step() -> None:
    _, costs = step_costs.run_arm("mixed", workload(30, 0), seed=0)
    rows = step_costs.table(costs, timer=0.0)
    assert {r["kind"] for r in rows} == set(costs)
    assert sum(float(r["share"]) for r in rows) == pytest.approx(1.0)
    for r in rows:
        c = costs[str(r["kind"])]
        assert r["steps"] == len(c.items)
        assert float(r["ns_per_step"]) == pytest.approx(
            sum(float(r[p]) for p in step_costs.PHASES))
        assert float(r["ns_per_step"]) == pytest.approx(sum(c.step_ns()) / len(c.items))
    shares = [float(r["share"]) for r in rows]
    assert shares == sorted(shares, reverse=True)


def test_main_prints_every_arm(capsys: pytest.CaptureFixture[str]) -> None:
    assert step_costs.main(["--arms", "mixed", "wavefront", "--num-requests", "10"]) == 0
    out = capsys.readouterr().out
    assert "\nmixed: " in out and "\nwavefront: " in out and "fixed" in out
    assert step_costs.main(["--arms", "mixed", "--num-requests", "10", "--step-rows", "off"]) == 0
    assert "step rows off" in capsys.readouterr().out
    for bad in (["--num-requests", "0"], ["--arms", "mixd"]):
        with pytest.raises(SystemExit) as e:
            step_costs.main(bad)
        assert e.value.code == 2


def test_the_fit_needs_enough_steps_of_a_kind() -> None:
    _, costs = step_costs.run_arm("atomic", workload(200, 0), seed=0)
    rows = {r["kind"]: r for r in step_costs.table(costs, timer=0.0)}
    for kind, r in rows.items():
        assert ("fixed_ns" in r) is (len(costs[str(kind)].items) >= step_costs.MIN_FIT_STEPS)
    # a few hundred PREFILL steps of one or two items: no fit; thousands of CODA steps: one
    prefill = costs["prefill"]
    assert len(prefill.items) < step_costs.MIN_FIT_STEPS and len(set(prefill.items)) > 1
    assert "fixed_ns" not in rows["prefill"] and "fixed_ns" in rows["coda"]
