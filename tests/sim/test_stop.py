"""A stop request (set by the first SIGINT / SIGTERM, ``sim.stop``) ends a simulation after
the current step, not at the end of the run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.core import SamplingParams
from engine.core.records import ArrivalSpec
from sim import simulate, stop
from sim.cost.base import StepContext
from sim.cost.constant import ConstantCost
from sim.errors import SimulationStopped
from tests.helpers import ListSource, make_config


@pytest.fixture(autouse=True)
def _cleared() -> Iterator[None]:
    stop.clear()
    yield
    stop.clear()


def _specs(n: int) -> list[ArrivalSpec]:
    return [ArrivalSpec(f"r{i}", tuple(range(1, 9)), SamplingParams(max_tokens=64,
                        ignore_eos=True), 0.01 * i, False) for i in range(n)]


class _StopAt:
    """A constant cost that requests a stop when step ``at`` is priced."""

    def __init__(self, at: int) -> None:
        self.inner, self.at, self.steps = ConstantCost(0.001), at, 0

    def step_time(self, ctx: StepContext) -> float:
        self.steps += 1
        if self.steps == self.at:
            stop.request()
        return self.inner.step_time(ctx)


def test_a_stop_request_ends_the_run_after_the_current_step() -> None:
    cost = _StopAt(at=5)
    with pytest.raises(SimulationStopped, match="stopped at step"):
        simulate(make_config("atomic"), ListSource(_specs(50)), cost)  # type: ignore[arg-type]
    assert cost.steps == 5  # not one step more: the run ended where it was asked to


def test_without_a_request_the_run_ends_normally() -> None:
    records = simulate(make_config("atomic"), ListSource(_specs(5)), ConstantCost(0.001))
    assert len(records.requests) == 5


def test_a_stop_request_ends_a_cluster_run_after_the_current_step() -> None:
    from sim.cluster import ClusterConfig, simulate_cluster

    cost = _StopAt(at=5)
    with pytest.raises(SimulationStopped, match="stopped at step"):
        simulate_cluster(make_config("atomic"), ClusterConfig(num_replicas=2),
                         ListSource(_specs(50)), cost)  # type: ignore[arg-type]
    assert cost.steps == 5  # every replica prices through one clock type that checks the flag
