"""The one way in to the real engine (``loopserve.targets.real``, torch): imported on demand,
so planning and running in the simulator never load torch; an ImportError becomes a
UserError naming ``--target``."""

from __future__ import annotations

from types import ModuleType

from loopserve.errors import UserError
from loopserve.runs import interrupts
from loopserve.schema.scenario import Scenario
from loopserve.targets import Target


def _real() -> ModuleType:
    try:
        # Lazy: torch loads only when a real target (cpu | cuda) is asked for.
        with interrupts.importing():
            from loopserve.targets import real
    except ImportError as err:
        raise UserError(
            "--target", f"the real engine is not available ({err}); use --target sim"
        ) from None
    return real


def check_real(target: str) -> None:
    """Raise a UserError when the real engine or the ``target`` device is unavailable."""
    _real().check_device(target)


def device_free(target: str) -> int | None:
    """Free memory of the ``target`` GPU in bytes (None on cpu: the host's counts)."""
    free: int | None = _real().device_free(target)
    return free


def real_target(scn: Scenario, target: str) -> Target:
    """The real engine on ``target`` (cpu | cuda), its model built once for every run."""
    built: Target = _real().RealTarget(scn, target)
    return built
