"""The simulator as a target: each run priced by its sweep point's cost model, in simulated
time (``sim.driver.simulate``), with the exit signals its point's scenario asks for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.core.config import ModelShape
from engine.core.records import ArrivalSource, RunRecords
from loopserve.targets import RunSpec
from sim.cost.base import CostModel
from sim.driver import simulate
from sim.exit_model import make_signal_fn

if TYPE_CHECKING:
    from loopserve.plan.sweep import SweepPoint


@dataclass(frozen=True)
class SimTarget:
    """Simulates runs of one plan, each with its planned point's cost model and exit model
    (``points`` by point id)."""

    shape: ModelShape
    points: Mapping[int, SweepPoint]
    record_steps: bool = True  # off: step rows only counted (a probe judged on latencies)

    def run(self, spec: RunSpec, source: ArrivalSource) -> RunRecords:
        cost = self.points[spec.point_id].cost
        if cost is None:
            raise RuntimeError(f"point {spec.point_id} has no cost model (planned for a real "
                               "target)")
        return self.simulate(spec, source, cost)

    def info(self) -> None:
        return None

    def simulate(self, spec: RunSpec, source: ArrivalSource, cost: CostModel) -> RunRecords:
        """One run priced by ``cost`` instead of the point's own (fidelity's capture)."""
        point = self.points[spec.point_id]
        signal_fn = make_signal_fn(spec.cfg.exit, self.shape.num_depths, seed=spec.seed,
                                   mean_lambdas=point.exit_lambdas, profile=point.exit_profile,
                                   layout=spec.cfg.cache.layout, draw=point.exit_draw)
        if spec.cluster is not None:
            from sim.cluster.driver import simulate_cluster

            return simulate_cluster(spec.cfg, spec.cluster, source, cost, signal_fn=signal_fn,
                                    seed=spec.seed, vocab_size=self.shape.vocab_size)
        return simulate(spec.cfg, source, cost, signal_fn=signal_fn, seed=spec.seed,
                        vocab_size=self.shape.vocab_size, record_steps=self.record_steps)
