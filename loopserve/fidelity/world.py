"""The runs of a fidelity comparison, one per world: ``WorldRun`` (records, the executed
batches in order, metrics), the measured world (``RealWorld``, filled by
``loopserve.fidelity.measured``) and the simulated one (``run_sim``).

The simulator runs each planned run with the calibrated cost, the batches captured as the
cost model sees them; the real target runs the same specs through ``run_realtime`` with a
``RecordingRunner`` (each executed batch, its wall and thread-CPU time). Sim and real share
configs, workload sources and seeds, so their batch sequences must agree wherever the
schedule does not depend on timing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.batch import Batch
from engine.core.records import RunRecords
from loopserve.plan import Plan, run_source
from loopserve.plan.sweep import SweepPoint
from loopserve.runs.loop import each_run, sim_target
from loopserve.stats.metrics import Metrics, summarize
from loopserve.targets import RunSpec
from sim.cost.base import CostModel, SplitCostModel, StepContext, Waits

# A real loop's host gap between back-to-back steps (well under IDLE_FROM_S) is no idle time;
# the simulator prices it in ``step_gap`` and starts the next step at once.
IDLE_FROM_S = 1e-3


@dataclass
class WorldRun:
    """One run in one world: records, the executed batches in order, metrics."""

    spec: RunSpec
    records: RunRecords
    batches: list[Batch]
    metrics: Metrics
    cpu_s: list[float] = field(default_factory=list)  # real world: thread CPU per execute
    predicted_s: list[float] = field(default_factory=list)  # real world: see ``predict``

    def predict(self, cost: SplitCostModel) -> list[float]:
        """The profile's execute time of each step, each priced after the step before it and
        the time the engine sat idle before it, as the simulator prices them (computed once;
        the comparison, the drift rows, the report and steps.csv share it)."""
        if not self.predicted_s:
            s = self.records.steps
            ends = [0.0, *s.end_s]
            waits, out = Waits(IDLE_FROM_S), []
            for i, b in enumerate(self.batches):
                waits.start(s.start_s[i] - ends[i])
                out.append(cost.execute_time(StepContext(
                    b, self.batches[i - 1] if i else None, waits.idle_s, waits.since_idle)))
            self.predicted_s = out
        return self.predicted_s

    def ratios(self, cost: SplitCostModel) -> list[float]:
        """Measured / predicted execute time of each step (nan where nothing is predicted)."""
        return [(s.end_s - s.start_s) / p if p > 0 else float("nan")
                for s, p in zip(self.records.steps, self.predict(cost), strict=True)]


@dataclass
class RealWorld:
    """The measured runs plus the reference probes timed just before and after them."""

    runs: list[WorldRun]
    probes_before: dict[str, float]
    probes_after: dict[str, float]


class _Capture:
    """A cost model that records every batch it prices (one call per simulated step)."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self.batches: list[Batch] = []

    def step_time(self, ctx: StepContext) -> float:
        self.batches.append(ctx.batch)
        return float(self.cost.step_time(ctx))

    def breakdown(self, batch: Batch) -> dict[str, float]:
        return dict(self.cost.breakdown(batch))


def run_sim(plan: Plan, *, progress: bool = True) -> list[WorldRun]:
    """Every planned run in the simulator (calibrated cost), batches captured."""
    target = sim_target(plan)

    def one(point: SweepPoint, spec: RunSpec) -> WorldRun:
        assert point.cost is not None  # a simulated plan prices every point
        capture = _Capture(point.cost)
        records = target.simulate(spec, run_source(point.scenario, spec.seed, plan.shape),
                                  capture)
        return WorldRun(spec, records, capture.batches, summarize(records, plan.shape.num_depths))

    return each_run(plan, one, progress=progress, world="sim")
