"""A planned sweep point holds what its runs need (each arm's engine config, its cost model
and record, its exit model), and every simulated run is priced by its own point's cost
model."""

from __future__ import annotations

from loopserve.plan import plan_runs
from loopserve.runs.loop import execute
from loopserve.schema import validate
from sim.cost.constant import ConstantCost
from tests.scenario_fixtures import tiny

CALL_S = (0.001, 0.004)


def test_each_planned_point_holds_its_configs_cost_and_exit_model() -> None:
    scn = validate(tiny(repeats=1, sweep={"cost.core_call_s": list(CALL_S)}))
    plan = plan_runs(scn, "sim")
    assert [p.values for p in plan.points] == [{"cost.core_call_s": s} for s in CALL_S]
    for point, call_s in zip(plan.points, CALL_S, strict=True):
        assert list(point.configs) == scn.arms
        assert isinstance(point.cost, ConstantCost) and point.cost.core_call_s == call_s
        assert point.cost_record["kind"] == "constant"
        assert point.exits is not None and point.exits.kind == "core"
    for spec in plan.runs:
        assert spec.cfg is plan.point(spec.point_id).configs[spec.arm]


def test_every_run_is_priced_by_its_own_points_cost_model() -> None:
    plan = plan_runs(validate(tiny(repeats=1, sweep={"cost.core_call_s": list(CALL_S)})),
                     "sim")
    results = execute(plan, progress=False)
    for arm in plan.scenario.arms:
        e2el = [r.metrics["e2el_ms"]["mean"] for r in results if r.spec.arm == arm]
        assert len(e2el) == 2 and e2el[0] is not None and e2el[1] is not None
        # the same steps at 4x the price of each core call
        assert abs(e2el[1] / e2el[0] - CALL_S[1] / CALL_S[0]) < 0.05, (arm, e2el)
