"""What a target is: it runs one planned run (``RunSpec``) on an arrival source and returns
its records. The simulator (``loopserve.targets.sim``) and the real engine
(``loopserve.targets.real``) are the two; ``real_target`` is the one way in to the second, so
the simulator path never loads torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

from engine.core.config import EngineConfig
from engine.core.records import ArrivalSource, RunRecords
from loopserve.errors import UserError
from loopserve.schema.scenario import Scenario


@dataclass(frozen=True)
class RunSpec:
    """One run: an arm at a sweep point, one repeat, with its validated config."""

    arm: str
    point_id: int
    repeat: int
    seed: int
    cfg: EngineConfig


class Target(Protocol):
    """Runs one planned run to its records."""

    def run(self, spec: RunSpec, source: ArrivalSource) -> RunRecords:
        """Every request of ``source`` through an engine configured by ``spec.cfg``."""
        ...


def _real() -> ModuleType:
    try:
        # Lazy: torch loads only when a real target (cpu | cuda) is asked for.
        from loopserve.targets import real
    except ImportError as err:
        raise UserError(
            "--target", f"the real engine is not available ({err}); use --target sim"
        ) from None
    return real


def check_real(target: str) -> None:
    """Raise a UserError when the real engine or the ``target`` device is unavailable."""
    _real().check_device(target)


def real_target(scn: Scenario, target: str) -> Target:
    """The real engine on ``target`` (cpu | cuda), its model built once for every run."""
    built: Target = _real().RealTarget(scn, target)
    return built
