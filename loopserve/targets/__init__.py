"""Where a planned run runs: a ``Target`` runs one planned run (``RunSpec``) on an arrival
source and returns its records. The simulator (``loopserve.targets.sim``) and the real engine
on wall-clock time (``loopserve.targets.real``, the user layer's one importer of torch besides
``loopserve.calibrate``) are the two; ``loopserve.targets.load`` is the one way in to the
second, so the simulator path never loads torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from engine.core.config import EngineConfig
from engine.core.records import ArrivalSource, RunRecords

if TYPE_CHECKING:
    from sim.cluster.config import ClusterConfig


@dataclass(frozen=True)
class RunSpec:
    """One run: an arm at a sweep point, one repeat, with its validated config."""

    arm: str
    point_id: int
    repeat: int
    seed: int
    cfg: EngineConfig
    cluster: ClusterConfig | None = None  # the simulator only: None is one engine


class Target(Protocol):
    """Runs one planned run to its records."""

    def run(self, spec: RunSpec, source: ArrivalSource) -> RunRecords:
        """Every request of ``source`` through an engine configured by ``spec.cfg``."""
        ...

    def info(self) -> dict[str, Any] | None:
        """What env.json records of the engine that ran (``runner``); None: nothing."""
        ...
