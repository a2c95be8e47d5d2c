"""Plan a scenario's runs: every sweep point x repeat x arm, interleaved (r0: A0 A1 A2, r1: ...).

Repeats are independent replications: repeat r of every point runs on ``repeat_seed(seed, r)``
(its workload draws, sampled tokens and exit signals), the same seed for every arm of that
repeat so the arms stay paired.

``plan_runs`` resolves and validates everything first (points, one ``EngineConfig`` per arm
and point, cost models, workload sources), so bad input fails before any run or file;
``loopserve.runs`` then runs the plan on its target. Its parts: the sweep grid and repeat
seeds (``sweep``), equal arms (``equal_arms``), each point's exit model (``exit_source``) and
the memory estimate (``footprint``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from engine.core.config import ModelShape
from engine.core.records import ArrivalSource
from engine.core.shapes import MODEL_SHAPES
from loopserve.errors import UserError
from loopserve.plan import equal_arms, footprint
from loopserve.plan.exit_source import exit_source
from loopserve.plan.sweep import SweepPoint, expand, reference_point, repeat_seed
from loopserve.schema.build import engine_config, lifetime_bound, model_shape
from loopserve.schema.scenario import Scenario
from loopserve.targets import RunSpec, Target
from loopserve.workloads import build_source
from sim.cost import make_cost_model
from sim.cost.base import CostModel
from sim.cost.resolve import describe_cost, resolve_cost

if TYPE_CHECKING:
    from sim.cluster.config import ClusterConfig

TARGETS = ("sim", "cpu", "cuda")


@dataclass
class Plan:
    """Everything validated and ready to execute: the planned points and their runs."""

    scenario: Scenario
    target: str
    shape: ModelShape
    points: list[SweepPoint]  # planned: configs, cost model and exit model filled in
    runs: list[RunSpec]
    reference_point_id: int
    real: Target | None = None  # the real engine, built on the first real run

    def point(self, point_id: int) -> SweepPoint:
        """The planned point ``point_id``."""
        return next(p for p in self.points if p.point_id == point_id)

    @property
    def cost_model(self) -> dict[str, str | None]:
        """The reference point's cost model (summary.json and env.json ``cost_model``)."""
        return self.point(self.reference_point_id).cost_record

    @property
    def derived_chunks(self) -> dict[int, int]:
        """Point id -> the chunk ``chunk_policy: derive`` gave every arm (points that kept
        theirs absent)."""
        return {p.point_id: c for p in self.points if (c := p.derived_chunk) is not None}


def plan_runs(scn: Scenario, target: str) -> Plan:
    """Resolve points, configs, cost models and sources; raise UserError on any bad input."""
    if target not in TARGETS:
        raise UserError("--target", f"unknown target {target!r}; use one of {'|'.join(TARGETS)}")
    if target != "sim":
        if scn.cluster is not None:
            raise UserError("cluster", "the cluster section is simulated only (--target sim); "
                            "put several `loopserve serve` processes behind a router to run "
                            "replicas for real (docs/cluster.md)")
        from loopserve.targets.load import check_real

        check_real(target)
    shape = model_shape(scn.model)
    grid = expand(scn)
    ref = reference_point(scn.model_dump(), [p.row for p in grid])
    footprint.check_sources(scn, grid, shape)  # before any source is built
    points = [_plan_point(point, shape, target, scn.is_sweep) for point in grid]
    plan = Plan(scn, target, shape, points, [], ref)
    equal_arms.log_derived(plan.derived_chunks, {
        p.point_id: p.configs[scn.arms[0]].scheduler.prefill_chunk_size
        for p in points if p.derived_chunk is not None})
    dtype = scn.runner.dtype or ("float32" if target == "cpu" else "bfloat16")
    free: int | None = None
    if target != "sim":
        from loopserve.targets.load import device_free

        free = device_free(target)
    footprint.check_plan(scn, {(p.point_id, a): c for p in points for a, c in p.configs.items()},
                         target=target, dtype_bytes=4 if dtype == "float32" else 2,
                         device_free=free, lifetimes={p.point_id: p.lifetime for p in points})
    for point in points:
        for repeat in range(scn.repeats):
            for arm in scn.arms:
                plan.runs.append(
                    RunSpec(arm, point.point_id, repeat, repeat_seed(scn.seed, repeat),
                            point.configs[arm], _cluster(point.scenario))
                )
    return plan


def _plan_point(point: SweepPoint, shape: ModelShape, target: str,
                is_sweep: bool) -> SweepPoint:
    """``point`` with each arm's engine config, its lifetime bound and what differs between
    its arms, and on the simulator its cost model and exit model; UserError naming the point
    on bad input (naming the point in a sweep)."""
    scn = point.scenario
    context = f"sweep point {point.point_id}: {point.label}" if is_sweep else ""
    lifetime = _lifetime_bound(scn, shape)
    configs = {arm: engine_config(scn, arm, shape, lifetime, context) for arm in scn.arms}
    unequal = equal_arms.check_point(configs, scn.allow_unequal_arms, context)
    if target != "sim":
        return replace(point, configs=configs, lifetime=lifetime, unequal_arms=unequal,
                       cost_record=describe_cost(scn.cost.kind, "measured", None, None))
    cost, record = _cost_model(scn, shape, context)
    seeds = [repeat_seed(scn.seed, r) for r in range(scn.repeats)]
    return replace(point, configs=configs, lifetime=lifetime, unequal_arms=unequal,
                   cost_record=record, cost=cost, exits=exit_source(scn, shape, seeds, context))


def _cluster(scn: Scenario) -> ClusterConfig | None:
    return None if scn.cluster is None else scn.cluster.config()


def run_source(scn: Scenario, seed: int, shape: ModelShape) -> ArrivalSource:
    """The workload's arrival source for one run (fresh per run: sources keep state)."""
    try:
        return build_source(scn.workload, seed=seed, vocab_size=shape.vocab_size,
                            exit_trace=scn.exit.trace)
    except (ValueError, OSError) as err:
        where = "workload.path" if hasattr(scn.workload, "path") else "workload"
        raise UserError.from_value_error(ValueError(str(err)), where) from None


def _lifetime_bound(scn: Scenario, shape: ModelShape) -> int:
    """Longest request lifetime of the point's workload; checks trace-mode exit traces."""
    source = run_source(scn, scn.seed, shape)
    all_specs = getattr(source, "all_specs", source.initial)  # StaticSource knows injections
    specs = list(all_specs())
    if scn.exit.mode == "trace" and any(s.params.exit_trace is None for s in specs):
        raise UserError("exit.trace", "exit mode trace needs exit.trace: [D, d1, d2, ...] or a "
                        "trace workload whose rows carry exit_depths")
    lifetimes = (len(s.prompt_token_ids) + s.params.max_tokens - 1 for s in specs)
    return lifetime_bound(scn.workload.model_dump(), lifetimes)


def _cost_model(scn: Scenario, shape: ModelShape,
                context: str) -> tuple[CostModel, dict[str, str | None]]:
    # kind "auto": the calibrated profile for (hardware, model) when one is checked in
    kind, profile = resolve_cost(scn.cost.kind, scn.cost.profile, scn.hardware, scn.model,
                                 scn.base_dir)
    record = describe_cost(scn.cost.kind, kind, profile, scn.hardware)
    try:
        return make_cost_model(
            kind, shape, hardware=scn.hardware, core_call_s=scn.cost.core_call_s,
            profile=profile,
            model_name=scn.model if scn.model in MODEL_SHAPES else None,
        ), record
    except (ValueError, OSError) as err:
        raise UserError.from_value_error(ValueError(str(err)), "cost", context) from None
