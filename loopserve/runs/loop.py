"""Run a plan: every planned run in order on its target, under a progress bar, each checked
for validity and summarised (``execute``; on the simulator optionally as Ray tasks,
``loopserve.runs.ray_runs``); ``each_run`` is the loop itself, shared with ``loopserve
fidelity``'s two worlds."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from tqdm import tqdm

from engine.core.records import ArrivalSource
from loopserve.errors import UserError
from loopserve.plan import Plan, run_source
from loopserve.plan.sweep import SweepPoint
from loopserve.runs import interrupts
from loopserve.stats.metrics import RunResult, summarize_with_gaps
from loopserve.targets import RunSpec, Target
from loopserve.targets.sim import SimTarget
from loopserve.workloads.base import StaticSource
from sim.validity import check

T = TypeVar("T")


def sim_target(plan: Plan) -> SimTarget:
    """The simulator priced by the plan's cost models."""
    return SimTarget(plan.shape, {p.point_id: p for p in plan.points})


def target_of(plan: Plan) -> Target:
    """The plan's target: the simulator, or the real engine built once (``plan.real``)."""
    if plan.target == "sim":
        return sim_target(plan)
    if plan.real is None:
        from loopserve.targets.load import real_target  # the real engine's modules, on demand

        plan.real = real_target(plan.scenario, plan.target)
    return plan.real


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
            interrupts.check()
            bar.set_postfix_str(f"{spec.arm} p{spec.point_id} r{spec.repeat}", refresh=False)
            out.append(one(spec))
    interrupts.check()
    return out


def run_checked(plan: Plan, target: Target, point: SweepPoint, spec: RunSpec,
                source: ArrivalSource | None = None) -> RunResult:
    """One planned run on ``target``, checked for validity and summarised; ``source``: its
    arrival source when the caller has one (``reused_sources``), else built here."""
    if source is None:
        source = run_source(point.scenario, spec.seed, plan.shape)
    records = target.run(spec, source)
    metrics, itl_s = summarize_with_gaps(records, plan.shape.num_depths)
    return RunResult(spec, records, check(records, spec.arm), metrics, itl_s)


def execute(plan: Plan, *, progress: bool = True, record_steps: bool = True) -> list[RunResult]:
    """Every planned run in order (``each_run``), each checked and summarised
    (``ray_runs.execute_on_ray`` gives the same results from Ray tasks). Without
    ``record_steps`` a simulated run keeps no step rows, only their counts: for a caller that
    needs the metrics and writes no tables (a capacity probe)."""
    target = target_of(plan)
    if not record_steps and isinstance(target, SimTarget):
        target = replace(target, record_steps=False)
    source = reused_sources(plan)
    return each_run(plan, lambda point, spec: run_checked(plan, target, point, spec,
                                                          source(point, spec)),
                    progress=progress)


def reused_sources(plan: Plan) -> Callable[[SweepPoint, RunSpec], ArrivalSource]:
    """Each run's arrival source. The arms of one point and repeat run one workload, planned
    one after another, so a stateless source (``StaticSource``) built for one run serves the
    next runs with the same point and seed; only the latest is kept."""
    kept: dict[tuple[int, int], ArrivalSource] = {}

    def source(point: SweepPoint, spec: RunSpec) -> ArrivalSource:
        key = (spec.point_id, spec.seed)
        if key in kept:
            return kept[key]
        built = run_source(point.scenario, spec.seed, plan.shape)
        kept.clear()
        if isinstance(built, StaticSource):
            kept[key] = built
        return built

    return source
