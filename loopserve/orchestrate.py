"""Run a scenario: every sweep point x repeat x arm, interleaved (r0: A0 A1 A2, r1: ...).

``plan_runs`` resolves and validates everything first (points, one ``EngineConfig`` per arm
and point, cost models, workload sources), so bad input fails before any run or file;
``execute`` then runs the plan in the simulator or on the real engine, with a progress bar.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tqdm import tqdm

from engine.core.config import EngineConfig, ModelShape
from engine.core.records import ArrivalSource, RunRecords
from loopserve.errors import UserError
from loopserve.schema.build import engine_config, lifetime_bound, model_shape
from loopserve.schema.scenario import Scenario
from loopserve.sweep import SweepPoint, expand, reference_point

TARGETS = ("sim", "cpu", "cuda")
T = TypeVar("T")


@dataclass(frozen=True)
class RunSpec:
    """One run: an arm at a sweep point, one repeat, with its validated config."""

    arm: str
    point_id: int
    repeat: int
    seed: int
    cfg: EngineConfig


@dataclass
class RunResult:
    """A finished run: raw records, validity reasons and its metrics summary."""

    spec: RunSpec
    records: RunRecords
    invalid_reasons: list[str]
    metrics: dict[str, Any]

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons


@dataclass
class Plan:
    """Everything validated and ready to execute."""

    scenario: Scenario
    target: str
    shape: ModelShape
    points: list[SweepPoint]
    runs: list[RunSpec]
    reference_point_id: int
    costs: dict[int, Any] = field(default_factory=dict)  # point_id -> CostModel (sim only)
    real: Any = None  # loopserve.realtime.RealTarget, built on the first real run


def plan_runs(scn: Scenario, target: str) -> Plan:
    """Resolve points, configs, cost models and sources; raise UserError on any bad input."""
    if target not in TARGETS:
        raise UserError("--target", f"unknown target {target!r}; use one of {'|'.join(TARGETS)}")
    if target != "sim":
        from loopserve.realtime import check_target

        check_target(target)
    shape = model_shape(scn.model)
    points = expand(scn)
    ref = reference_point(
        scn.model_dump(), [{"point_id": p.point_id, "values": p.values} for p in points]
    )
    plan = Plan(scn, target, shape, points, [], ref)
    configs: dict[tuple[int, str], EngineConfig] = {}
    for point in points:
        context = f"sweep point {point.point_id}: {point.label}" if scn.is_sweep else ""
        bound = _lifetime_bound(point.scenario, shape)
        for arm in scn.arms:
            configs[point.point_id, arm] = engine_config(
                point.scenario, arm, shape, bound, context
            )
        if target == "sim":
            plan.costs[point.point_id] = _cost_model(point.scenario, shape, context)
    for point in points:
        for repeat in range(scn.repeats):
            for arm in scn.arms:
                plan.runs.append(
                    RunSpec(arm, point.point_id, repeat, scn.seed + repeat,
                            configs[point.point_id, arm])
                )
    return plan


def each_run(plan: Plan, run_one: Callable[[SweepPoint, RunSpec], T], *,
             progress: bool = True, world: str | None = None,
             after_warmup: Callable[[], None] | None = None) -> list[T]:
    """``run_one`` for every planned run in order, under a progress bar. On a real target an
    untimed warm-up run comes first when the scenario asks for it (first-run costs are not
    data); ``after_warmup`` is called once before the timed runs, warm-up or not. ValueErrors
    from a run (the warm-up included) become UserErrors naming it."""
    by_id = {p.point_id: p for p in plan.points}

    def one(spec: RunSpec, what: str = "") -> T:
        try:
            return run_one(by_id[spec.point_id], spec)
        except ValueError as err:
            raise UserError.from_value_error(
                err, "workload",
                f"{what}arm {spec.arm}, point {spec.point_id}, repeat {spec.repeat}",
            ) from None

    if plan.target != "sim" and plan.scenario.runner.warmup and plan.runs:
        one(plan.runs[0], "warm-up run, ")
    if after_warmup is not None:
        after_warmup()
    out = []
    with tqdm(plan.runs, desc=f"{plan.scenario.name} [{world or plan.target}]", unit="run",
              file=sys.stderr, disable=not progress, leave=False) as bar:
        for spec in bar:
            bar.set_postfix_str(f"{spec.arm} p{spec.point_id} r{spec.repeat}", refresh=False)
            out.append(one(spec))
    return out


def execute(plan: Plan, *, progress: bool = True) -> list[RunResult]:
    """Run every planned run in order (``each_run``), each checked and summarised."""
    from loopserve.metrics import summarize
    from sim.validity import check

    one = simulate_run if plan.target == "sim" else _run_real
    runs = each_run(plan, lambda point, spec: one(plan, point, spec), progress=progress)
    return [RunResult(spec, records, check(records, spec.arm),
                      summarize(records, plan.shape.num_depths))
            for spec, records in zip(plan.runs, runs, strict=True)]


# ---- sources, cost models and runners ------------------------------------------------------
def build_source(scn: Scenario, seed: int, shape: ModelShape) -> ArrivalSource:
    """The workload's arrival source for one run (fresh per run: sources keep state)."""
    from loopserve.workloads import build_source as build

    try:
        return build(scn.workload, seed=seed, vocab_size=shape.vocab_size,
                     exit_trace=scn.exit.trace)
    except (ValueError, OSError) as err:
        where = "workload.path" if hasattr(scn.workload, "path") else "workload"
        raise UserError.from_value_error(ValueError(str(err)), where) from None


def _lifetime_bound(scn: Scenario, shape: ModelShape) -> int:
    """Longest request lifetime of the point's workload; checks trace-mode exit traces."""
    source = build_source(scn, scn.seed, shape)
    all_specs = getattr(source, "all_specs", source.initial)  # StaticSource knows injections
    specs = list(all_specs())
    if scn.exit.mode == "trace" and any(s.params.exit_trace is None for s in specs):
        raise UserError("exit.trace", "exit mode trace needs exit.trace: [D, d1, d2, ...] or a "
                        "trace workload whose rows carry exit_depths")
    lifetimes = (len(s.prompt_token_ids) + s.params.max_tokens - 1 for s in specs)
    return lifetime_bound(scn.workload.model_dump(), lifetimes)


def _cost_model(scn: Scenario, shape: ModelShape, context: str) -> Any:
    from sim.cost import make_cost_model
    from sim.cost.resolve import resolve_cost
    from sim.shapes import MODEL_SHAPES

    # kind "auto": the calibrated profile for (hardware, model) when one is checked in
    kind, profile = resolve_cost(scn.cost.kind, scn.cost.profile, scn.hardware, scn.model)
    try:
        return make_cost_model(
            kind, shape, hardware=scn.hardware, core_call_s=scn.cost.core_call_s,
            profile=profile,
            model_name=scn.model if scn.model in MODEL_SHAPES else None,
        )
    except (ValueError, OSError) as err:
        raise UserError.from_value_error(ValueError(str(err)), "cost", context) from None


def simulate_run(plan: Plan, point: SweepPoint, spec: RunSpec, cost: Any = None) -> RunRecords:
    """One run in the simulator, priced by ``cost`` (default: the point's cost model)."""
    from sim.driver import simulate
    from sim.exit_model import make_signal_fn

    scn = point.scenario
    signal_fn = make_signal_fn(
        spec.cfg.exit, plan.shape.num_depths, seed=spec.seed, mean_lambdas=scn.exit.lambdas
    )
    return simulate(
        spec.cfg, build_source(scn, spec.seed, plan.shape),
        plan.costs[point.point_id] if cost is None else cost,
        signal_fn=signal_fn, seed=spec.seed, vocab_size=plan.shape.vocab_size,
    )


def _run_real(plan: Plan, point: SweepPoint, spec: RunSpec) -> RunRecords:
    if plan.real is None:
        from loopserve.realtime import RealTarget

        plan.real = RealTarget(plan.scenario, plan.target)
    records: RunRecords = plan.real.run(
        spec.cfg, build_source(point.scenario, spec.seed, plan.shape), spec.seed
    )
    return records
