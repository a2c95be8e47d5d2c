"""Cost models: how long a scheduled batch takes in simulation (docs/design.md)."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.core.config import ModelShape
from engine.core.shapes import shape_name
from sim.cost.base import (
    HARDWARE,
    CostModel,
    HardwarePreset,
    SplitCostModel,
    StepContext,
    get_hardware,
    item_context,
)
from sim.cost.roofline import RooflineCost

if TYPE_CHECKING:
    from sim.cost.profile import Profile

# Names re-exported from the modules a run needs only with their cost model: loaded on first
# use (``__getattr__``), so a roofline run never imports the calibrated model or its profile.
_LAZY: dict[str, str] = {
    "CalibratedCost": "sim.cost.calibrated",
    "AfterIdleCost": "sim.cost.after_idle",
    "ConstantCost": "sim.cost.constant",
    "FEATURE_NAMES": "sim.cost.features",
    "STEP_KINDS": "sim.cost.features",
    "batch_features": "sim.cost.features",
    "PROFILE_FORMAT": "sim.cost.profile",
    "Profile": "sim.cost.profile",
    "Provenance": "sim.cost.profile",
    "StageFit": "sim.cost.profile",
    "load_profile": "sim.cost.profile",
    "save_profile": "sim.cost.profile",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sim.cost' has no attribute {name!r}")


COST_KINDS: tuple[str, ...] = ("constant", "roofline", "calibrated")


def make_cost_model(
    kind: str,
    model: ModelShape,
    *,
    hardware: str = "h200",
    core_call_s: float | None = None,
    profile: str | Path | dict[str, Any] | Profile | None = None,
    dtype_bytes: int | None = None,
    model_name: str | None = None,
) -> CostModel:
    """Build a cost model.

    ``constant`` needs ``core_call_s``; ``roofline`` uses the ``hardware`` preset with
    ``dtype_bytes`` (default: the preset's, 2 on h200, 4 on cpu); ``calibrated`` loads
    ``profile`` and checks that it was measured on ``hardware`` for ``model_name`` (default:
    the preset name of ``model``; the model check is skipped when the shape is no preset),
    with the profile's measured effects composed onto it (``sim.cost.resolve.compose``).
    Raises ValueError naming the field on a bad value.
    """
    if kind == "constant":
        if core_call_s is None:
            raise ValueError("cost.core_call_s: the constant cost model needs core_call_s "
                             "(seconds per core call), e.g. 0.001")
        from sim.cost.constant import ConstantCost

        return ConstantCost(core_call_s)
    if kind == "roofline":
        hw = get_hardware(hardware)
        return RooflineCost(model, hw, hw.dtype_bytes if dtype_bytes is None else dtype_bytes)
    if kind == "calibrated":
        if profile is None:
            raise ValueError("cost.profile: the calibrated cost model needs a profile JSON path")
        from sim.cost.calibrated import CalibratedCost
        from sim.cost.resolve import compose

        cost = CalibratedCost(profile, hardware=hardware,
                              model=model_name if model_name is not None else shape_name(model))
        if cost.readback_note is not None:
            logging.getLogger(__name__).warning(cost.readback_note)
        return compose(cost, cost.profile)
    raise ValueError(f"cost.kind: unknown cost model {kind!r}; use one of {'|'.join(COST_KINDS)}")


__all__ = [
    "COST_KINDS",
    "AfterIdleCost",
    "FEATURE_NAMES",
    "HARDWARE",
    "PROFILE_FORMAT",
    "STEP_KINDS",
    "CalibratedCost",
    "ConstantCost",
    "CostModel",
    "SplitCostModel",
    "StepContext",
    "HardwarePreset",
    "Profile",
    "Provenance",
    "RooflineCost",
    "StageFit",
    "batch_features",
    "get_hardware",
    "item_context",
    "load_profile",
    "make_cost_model",
    "save_profile",
]
