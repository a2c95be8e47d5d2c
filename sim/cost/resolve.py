"""Find the checked-in calibrated profile for a hardware/model pair (no torch).

``find_profile("cpu", "small")`` -> ``results/profiles/cpu-small.json`` when that file exists
(relative to the working directory first, then to the repository), else None.
``resolve_cost`` maps a scenario's cost choice to what the cost factory gets: ``auto`` means
the calibrated profile when one is present for the scenario's hardware and model, the
roofline otherwise; every other kind passes through unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path

PROFILES_DIR = Path("results") / "profiles"
_REPO = Path(__file__).resolve().parents[2]


def model_label(name_or_dir: str) -> str:
    """The model name a profile carries: the preset name, or a checkpoint folder's name."""
    return Path(name_or_dir).name if os.path.isdir(name_or_dir) else name_or_dir


def profile_path(hardware: str, model: str, root: Path | None = None) -> Path:
    """Where the profile of ``hardware`` and ``model`` lives under ``root`` (default cwd)."""
    return (root or Path.cwd()) / PROFILES_DIR / f"{hardware}-{model_label(model)}.json"


def find_profile(hardware: str, model: str) -> Path | None:
    """The profile file for ``hardware`` / ``model`` if one exists, else None."""
    for root in (Path.cwd(), _REPO):
        path = profile_path(hardware, model, root)
        if path.is_file():
            return path
    return None


def resolve_cost(kind: str, profile: str | None, hardware: str,
                 model: str) -> tuple[str, str | None]:
    """``(kind, profile)`` for the cost factory; ``auto`` picks calibrated or roofline."""
    if kind != "auto":
        return kind, profile
    found = find_profile(hardware, model)
    return ("calibrated", str(found)) if found is not None else ("roofline", None)
