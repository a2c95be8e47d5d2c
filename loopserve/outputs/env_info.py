"""env.json: what produced a run (versions, platform, device, commit, command line, timing).

Wall-clock values live here, never in summary.json or tokens.csv, so those stay
byte-identical for the same scenario and seed.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from engine import _native

_PACKAGES = ("loopserve", "numpy", "pandas", "pydantic", "simpy", "matplotlib", "pyyaml", "tqdm")
_REPO = Path(__file__).resolve().parents[2]


def package_versions() -> dict[str, str | None]:
    """Installed versions; torch only when this process imported it (it is heavy)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    names = _PACKAGES + (("torch",) if "torch" in sys.modules else ())
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit() -> dict[str, Any]:
    """HEAD of the source checkout and whether it had local changes (null outside git)."""
    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(["git", "-C", str(_REPO), *args], capture_output=True,
                                 text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def commit_label(recorded: Path | None = _REPO / ".whl" / "COMMIT") -> str:
    """HEAD as ``sha`` or ``sha-dirty``; outside git (the tree sent to a lent GPU has no
    .git) the commit ``make gpu-wheels`` recorded in ``recorded``; else "unknown"."""
    g = git_commit()
    if g["commit"]:
        return str(g["commit"]) + ("-dirty" if g["dirty"] else "")
    if recorded is not None and recorded.is_file():
        return recorded.read_text().strip() or "unknown"
    return "unknown"


def native_build() -> dict[str, Any]:
    """Whether engine.core and the simulator's step code ran from the mypyc build."""
    return {"active": _native.active(), "reason": _native.reason() or "mypyc build in use",
            "build": _native.build_kind()}


def device_info(target: str, hardware: str) -> dict[str, Any]:
    """The simulated hardware preset, or the CPU / GPU the real engine ran on."""
    info: dict[str, Any] = {"target": target}
    if target == "sim":
        info["simulated_hardware"] = hardware
    info["cpu"] = platform.processor() or platform.machine()
    info["num_cpus"] = os.cpu_count()
    if target == "cuda" and "torch" in sys.modules:
        torch = sys.modules["torch"]  # the run loaded it; never loaded here (it is heavy)
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["cuda"] = torch.version.cuda
    return info


def collect(
    *, target: str, hardware: str, run_id: str, argv: list[str], started_s: float,
    run_wall_s: list[dict[str, Any]], runner: dict[str, Any] | None = None,
    exit_model: dict[str, Any] | None = None, cost_model: dict[str, Any] | None = None,
    cost_models: dict[int, dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole env.json document (``runner``: the real engine's backend and dtype;
    ``exit_model``: the simulator's exit model per point; ``cost_model``: the cost model
    that ran, with ``cost_model_per_point`` when sweep points ran different ones; ``extra``:
    further facts of the run, e.g. ``derived_chunks``)."""
    doc: dict[str, Any] = {
        "run_id": run_id,
        "command": argv,
        "cwd": os.getcwd(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started_s)),
        "total_wall_s": round(time.time() - started_s, 3),
        "platform": platform.platform(),
        "versions": package_versions(),
        "device": device_info(target, hardware),
        "git": git_commit(),
        "native": native_build(),
        "runs_wall_s": run_wall_s,
    }
    if runner is not None:
        doc["runner"] = runner
    if exit_model is not None:
        doc["exit_model"] = exit_model
    if cost_model is not None:
        doc["cost_model"] = cost_model
    if cost_models and any(c != cost_model for c in cost_models.values()):
        doc["cost_model_per_point"] = {str(i): c for i, c in cost_models.items()}
    doc.update(extra or {})
    return doc
