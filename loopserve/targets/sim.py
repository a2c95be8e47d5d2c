"""The simulator as a target: each run priced by its sweep point's cost model, in simulated
time (``sim.driver.simulate``), with the exit signals its point's scenario asks for."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.core.config import ModelShape
from engine.core.records import ArrivalSource, RunRecords
from loopserve.targets import RunSpec
from sim.cost.base import CostModel
from sim.driver import simulate
from sim.exit_model import ExitDraw, make_signal_fn

if TYPE_CHECKING:
    from sim.exit_profile import ExitProfile


@dataclass(frozen=True)
class SimTarget:
    """Simulates runs of one plan: ``costs``, ``exit_lambdas`` (synthetic means) and
    ``exit_profiles`` (measured λ rows, preferred when given) are per point id."""

    shape: ModelShape
    costs: Mapping[int, CostModel]
    exit_lambdas: Mapping[int, Sequence[float] | None]
    exit_profiles: Mapping[int, ExitProfile | None] | None = None
    exit_draws: Mapping[int, ExitDraw] | None = None  # per point: exit.draw (default request)
    record_steps: bool = True  # off: step rows only counted (a probe judged on latencies)

    def run(self, spec: RunSpec, source: ArrivalSource) -> RunRecords:
        return self.simulate(spec, source, self.costs[spec.point_id])

    def info(self) -> None:
        return None

    def simulate(self, spec: RunSpec, source: ArrivalSource, cost: CostModel) -> RunRecords:
        """One run priced by ``cost`` instead of the point's own (fidelity's capture)."""
        signal_fn = make_signal_fn(spec.cfg.exit, self.shape.num_depths, seed=spec.seed,
                                   mean_lambdas=self.exit_lambdas[spec.point_id],
                                   profile=(self.exit_profiles or {}).get(spec.point_id),
                                   layout=spec.cfg.cache.layout,
                                   draw=(self.exit_draws or {}).get(spec.point_id, "request"))
        if spec.cluster is not None:
            from sim.cluster.driver import simulate_cluster

            return simulate_cluster(spec.cfg, spec.cluster, source, cost, signal_fn=signal_fn,
                                    seed=spec.seed, vocab_size=self.shape.vocab_size)
        return simulate(spec.cfg, source, cost, signal_fn=signal_fn, seed=spec.seed,
                        vocab_size=self.shape.vocab_size, record_steps=self.record_steps)
