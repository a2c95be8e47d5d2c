"""Load a finished run folder (the files of DESIGN.md §11) for plots and reports.

``loopserve run`` renders its report from the files it just wrote, through this module, so a
report rebuilt later with ``loopserve report`` is the same document.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from loopserve.errors import UserError
from loopserve.runs.summary import MedianRow, Summary
from loopserve.runs.sweep import PointRow, reference_point

REQUIRED_FILES = ("summary.json", "scenario.yaml", "steps.csv", "requests.csv", "tokens.csv")


@dataclass
class RunData:
    """One run folder: its summary, resolved scenario, env and the three CSV tables."""

    path: Path
    summary: Summary
    scenario: dict[str, Any]  # the resolved scenario.yaml as read (YAML)
    env: dict[str, Any]  # env.json as read
    steps: pd.DataFrame
    requests: pd.DataFrame
    tokens: pd.DataFrame
    label: str = ""
    _ref: int | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return str(self.scenario.get("name", self.path.name))

    @property
    def target(self) -> str:
        runs = self.summary.get("runs")
        return str(runs[0].get("target", "?")) if runs else "?"

    @property
    def arms(self) -> list[str]:
        return list(self.scenario.get("arms", []))

    @property
    def points(self) -> list[PointRow]:
        return list(self.summary["points"])

    @property
    def reference_point_id(self) -> int:
        if self._ref is None:
            self._ref = reference_point(self.scenario, self.points)
        return self._ref

    def medians(self, point_id: int | None = None) -> list[MedianRow]:
        pid = self.reference_point_id if point_id is None else point_id
        return [m for m in self.summary["medians"] if m["point_id"] == pid]

    def point_values(self, point_id: int) -> dict[str, Any]:
        for p in self.points:
            if p["point_id"] == point_id:
                return dict(p["values"])
        return {}

    def series_label(self, arm: str, multi: bool) -> str:
        """``arm``, or ``label: arm`` when several runs share a report."""
        return f"{self.label}: {arm}" if multi else arm


def load_run(path: str | Path, label: str = "") -> RunData:
    """Read a run folder; a missing or unreadable file is a UserError naming it."""
    p = Path(path)
    if not p.is_dir():
        raise UserError("run_dir", f"{p}: no such run folder")
    for name in REQUIRED_FILES:
        if not (p / name).is_file():
            raise UserError("run_dir", f"{p}: missing {name}; is this a loopserve run folder?")
    try:
        summary = json.loads((p / "summary.json").read_text())
        scenario = yaml.safe_load((p / "scenario.yaml").read_text())
        env_path = p / "env.json"
        env = json.loads(env_path.read_text()) if env_path.is_file() else {}
        tables = {
            name: pd.read_csv(p / f"{name}.csv", keep_default_na=False, na_values=[""])
            for name in ("steps", "requests", "tokens")
        }
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise UserError("run_dir", f"{p}: cannot read run files ({err})") from None
    for df in tables.values():
        if "arm" in df:
            df["arm"] = df["arm"].astype(str)
    return RunData(p, summary, scenario, env, tables["steps"], tables["requests"],
                   tables["tokens"], label=label or p.name)
