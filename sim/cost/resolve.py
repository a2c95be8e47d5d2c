"""Find the checked-in calibrated profile for a hardware/model pair (no torch).

``find_profile("cpu", "small", base)`` -> the first ``cpu-small.json`` on the search path,
never relative to the working directory (the same scenario gives the same cost model from
anywhere): the folders of ``$LOOPSERVE_PROFILES`` (``os.pathsep``-separated), then
``results/profiles`` beside the scenario's folder and beside its parent (a scenario in the
repository's ``scenarios/``), then the source checkout's ``results/profiles``.
``resolve_cost`` maps a scenario's cost choice to what the cost factory gets: ``auto`` means
the calibrated profile when one is found for the scenario's hardware and model, the
roofline otherwise; every other kind passes through unchanged. ``compose`` wraps a base cost
model in the measured effects its profile carries, each one module (the first step after
idle: ``sim.cost.after_idle``). ``describe_cost`` is what a run records of the cost model
that ran (summary.json and env.json ``cost_model``).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.cost.base import CostModel
    from sim.cost.profile import Profile

PROFILES_DIR = Path("results") / "profiles"
PROFILES_ENV = "LOOPSERVE_PROFILES"
_REPO = Path(__file__).resolve().parents[2]


def model_label(name_or_dir: str) -> str:
    """The model name a profile carries: the preset name, or a checkpoint folder's name."""
    return Path(name_or_dir).name if os.path.isdir(name_or_dir) else name_or_dir


def profile_path(hardware: str, model: str, root: Path | None = None) -> Path:
    """Where the profile of ``hardware`` and ``model`` lives under ``root`` (default: the
    relative ``results/profiles``, where ``loopserve calibrate`` writes it)."""
    return (root or Path()) / PROFILES_DIR / profile_name(hardware, model)


def profile_name(hardware: str, model: str) -> str:
    """The profile's file name: ``<hardware>-<model>.json``."""
    return f"{hardware}-{model_label(model)}.json"


def search_path(base_dir: Path | None = None) -> list[Path]:
    """The folders ``find_profile`` looks in, in order (see the module docstring)."""
    env = [Path(p) for p in os.environ.get(PROFILES_ENV, "").split(os.pathsep) if p]
    near = [] if base_dir is None else [base_dir / PROFILES_DIR, base_dir.parent / PROFILES_DIR]
    return [*env, *near, _REPO / PROFILES_DIR]


def find_profile(hardware: str, model: str, base_dir: Path | None = None) -> Path | None:
    """The profile file for ``hardware`` / ``model`` on the search path, else None."""
    name = profile_name(hardware, model)
    for folder in search_path(base_dir):
        path = folder / name
        if path.is_file():
            return path.resolve()
    return None


def resolve_cost(kind: str, profile: str | None, hardware: str, model: str,
                 base_dir: Path | None = None) -> tuple[str, str | None]:
    """``(kind, profile)`` for the cost factory; ``auto`` picks calibrated or roofline."""
    if kind != "auto":
        return kind, profile
    found = find_profile(hardware, model, base_dir)
    return ("calibrated", str(found)) if found is not None else ("roofline", None)


def compose(base: CostModel, profile: Profile) -> CostModel:
    """``base`` with each measured effect ``profile`` carries composed onto it, outermost
    last; ``base`` itself when it carries none."""
    cost = base
    if profile.after_idle is not None:
        from sim.cost.after_idle import AfterIdleCost

        cost = AfterIdleCost(cost, profile.after_idle)
    return cost


def describe_cost(requested: str, kind: str, profile: str | None,
                  hardware: str | None) -> dict[str, str | None]:
    """The record of the cost model that ran: kind, profile path and sha256, hardware."""
    digest = None
    if profile is not None and Path(profile).is_file():
        digest = hashlib.sha256(Path(profile).read_bytes()).hexdigest()
    return {"kind": kind, "requested": requested, "profile": profile,
            "profile_sha256": digest, "hardware": hardware}
