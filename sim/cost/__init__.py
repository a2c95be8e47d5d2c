"""Cost models: how long a scheduled batch takes in simulation (docs/design.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.core.config import ModelShape
from engine.core.shapes import shape_name
from sim.cost.base import HARDWARE, CostModel, HardwarePreset, get_hardware, item_context
from sim.cost.calibrated import CalibratedCost
from sim.cost.constant import ConstantCost
from sim.cost.features import FEATURE_NAMES, STAGE_KINDS, batch_features
from sim.cost.profile import (
    PROFILE_FORMAT,
    Profile,
    Provenance,
    StageFit,
    load_profile,
    save_profile,
)
from sim.cost.roofline import RooflineCost

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
    the preset name of ``model``; the model check is skipped when the shape is no preset).
    Raises ValueError naming the field on a bad value.
    """
    if kind == "constant":
        if core_call_s is None:
            raise ValueError("cost.core_call_s: the constant cost model needs core_call_s "
                             "(seconds per core call), e.g. 0.001")
        return ConstantCost(core_call_s)
    if kind == "roofline":
        hw = get_hardware(hardware)
        return RooflineCost(model, hw, hw.dtype_bytes if dtype_bytes is None else dtype_bytes)
    if kind == "calibrated":
        if profile is None:
            raise ValueError("cost.profile: the calibrated cost model needs a profile JSON path")
        return CalibratedCost(profile, hardware=hardware,
                              model=model_name if model_name is not None else shape_name(model))
    raise ValueError(f"cost.kind: unknown cost model {kind!r}; use one of {'|'.join(COST_KINDS)}")


__all__ = [
    "COST_KINDS",
    "FEATURE_NAMES",
    "HARDWARE",
    "PROFILE_FORMAT",
    "STAGE_KINDS",
    "CalibratedCost",
    "ConstantCost",
    "CostModel",
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
