"""Load a finished run folder (the files of docs/design.md) for plots and reports: the one
reader of run folders, Parquet or CSV alike (``loopserve.outputs.tables``).

``loopserve run`` renders its report from the files it just wrote, through this module, so a
report rebuilt later with ``loopserve report`` is the same document. The tables are read on
first use; ``tokens`` is an empty frame when the run wrote no per-token rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from engine.core.guarded_read import FileReadError, read_json, read_text
from loopserve.errors import UserError
from loopserve.outputs.records import ITL_COLUMNS, RUN_KEY_COLUMNS, TOKENS_COLUMNS
from loopserve.outputs.tables import find_table, read_table
from loopserve.plan.sweep import PointRow, reference_point
from loopserve.stats.summary import MedianRow, Summary

REQUIRED_FILES = ("summary.json", "scenario.yaml")
REQUIRED_TABLES = ("steps", "requests")
_OPTIONAL_TABLES = {"tokens": TOKENS_COLUMNS, "itl_quantiles": ITL_COLUMNS}


class _Row(BaseModel):
    """The keys the report reads of every ``runs`` and ``medians`` row (others pass)."""

    arm: str
    point_id: int
    valid: bool


class _SummaryShape(BaseModel):
    """summary.json's shape (``loopserve.stats.summary.Summary``), checked before the report
    reads it, so a hand-edited or foreign file is one line, not a KeyError."""

    points: list[dict[str, Any]] = Field(min_length=1)
    runs: list[_Row]
    medians: list[_Row]


_SUMMARY = TypeAdapter(_SummaryShape)


class RunData:
    """One run folder: its summary, resolved scenario, env and its tables (``steps``,
    ``requests``, ``tokens``, ``itl_quantiles``), each read when first used. Frames given
    to the constructor are used as they are."""

    def __init__(self, path: Path, summary: Summary, scenario: dict[str, Any],
                 env: dict[str, Any], steps: pd.DataFrame | None = None,
                 requests: pd.DataFrame | None = None, tokens: pd.DataFrame | None = None,
                 label: str = "") -> None:
        self.path = path
        self.summary = summary
        self.scenario = scenario  # the resolved scenario.yaml as read (YAML)
        self.env = env  # env.json as read
        self.label = label
        self._tables: dict[str, pd.DataFrame] = {
            name: df for name, df in (("steps", steps), ("requests", requests),
                                      ("tokens", tokens)) if df is not None}
        self._ref: int | None = None

    def table(self, name: str) -> pd.DataFrame:
        """A table of the folder (an empty frame with its columns when an optional one is
        absent); UserError when it cannot be read."""
        if name not in self._tables:
            self._tables[name] = _load_table(self.path, name)
        return self._tables[name]

    @property
    def steps(self) -> pd.DataFrame:
        return self.table("steps")

    @property
    def requests(self) -> pd.DataFrame:
        return self.table("requests")

    @property
    def tokens(self) -> pd.DataFrame:
        return self.table("tokens")

    @tokens.setter
    def tokens(self, df: pd.DataFrame) -> None:
        self._tables["tokens"] = df

    @property
    def has_tokens(self) -> bool:
        """Whether the run wrote per-token rows (``outputs.tokens``, or a real target)."""
        if "tokens" in self._tables:
            return not self._tables["tokens"].empty
        return find_table(self.path, "tokens") is not None

    def first_repeat(self, name: str, arm: str, point_id: int,
                     columns: Sequence[str] = ()) -> pd.DataFrame:
        """The rows of ``name`` for ``arm`` at ``point_id`` in its lowest repeat (empty when
        there are none): the run keys and ``columns`` (all when empty). A table not yet
        loaded is read filtered, so the timeline of a 100k-request run reads its one run's
        columns only."""
        keys = {"arm": arm, "point_id": point_id}
        if name in self._tables or find_table(self.path, name) is None:
            df = self.table(name)
            sel = df[(df["arm"] == arm) & (df["point_id"] == point_id)]
            return sel[sel["repeat"] == sel["repeat"].min()] if not sel.empty else sel
        path = find_table(self.path, name)
        assert path is not None
        repeats = _read(path, ["repeat"], keys)["repeat"]
        if repeats.empty:
            return _read(path, [*RUN_KEY_COLUMNS, *columns] if columns else None, keys)
        return _read(path, [*RUN_KEY_COLUMNS, *columns] if columns else None,
                     {**keys, "repeat": int(repeats.min())})

    def first_repeats(self, name: str, arms: Sequence[str], point_id: int,
                      columns: Sequence[str] = ()) -> dict[str, pd.DataFrame]:
        """``first_repeat`` for each of ``arms``; a table not yet loaded is read twice
        (its run keys at the point, then the rows of the arms' lowest repeat), not twice per
        arm."""
        path = None if name in self._tables else find_table(self.path, name)
        if path is None:
            return {arm: self.first_repeat(name, arm, point_id, columns) for arm in arms}
        keys = _read(path, ["arm", "repeat"], {"point_id": point_id})
        lowest = keys.groupby("arm")["repeat"].min()
        out: dict[str, pd.DataFrame] = {}
        for repeat in sorted({int(lowest[arm]) for arm in arms if arm in lowest.index}):
            rows = _read(path, [*RUN_KEY_COLUMNS, *columns] if columns else None,
                         {"point_id": point_id, "repeat": repeat})
            for arm in arms:
                if arm in lowest.index and int(lowest[arm]) == repeat:
                    out[arm] = rows[rows["arm"] == arm].reset_index(drop=True)
        return {arm: out[arm] if arm in out else self.first_repeat(name, arm, point_id, columns)
                for arm in arms}

    def itl_distribution(self, arm: str, point_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(fraction of gaps <= x, x in ms) for ``arm`` at ``point_id``, every repeat pooled:
        the ``itl_quantiles`` table's points, or each gap from the token rows in a folder
        without that table; both empty when there are no gaps."""
        if find_table(self.path, "itl_quantiles") is None:
            toks = self.tokens
            if toks.empty:
                return np.empty(0), np.empty(0)
            df = toks[(toks["arm"] == arm) & (toks["point_id"] == point_id)]
            df = df.sort_values(["repeat", "request_id", "index"])
            gaps = df.groupby(["repeat", "request_id"], sort=False)["time_s"].diff().dropna()
            ms = np.sort(gaps.to_numpy(dtype=float) * 1e3)
            return np.arange(1, ms.size + 1) / max(ms.size, 1), ms
        q = self.table("itl_quantiles")
        if q.empty:
            return np.empty(0), np.empty(0)
        sel = q[(q["arm"] == arm) & (q["point_id"] == point_id)]
        return sel["quantile"].to_numpy(dtype=float), sel["itl_ms"].to_numpy(dtype=float)

    def itl_tail(self, arm: str, point_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(x in ms, fraction of gaps >= x) for ``arm`` at ``point_id`` (1 - CDF), from the
        same points as ``itl_distribution``; the largest gap's fraction is 1 / gaps."""
        y, ms = self.itl_distribution(arm, point_id)
        if not ms.size:
            return ms, y
        if find_table(self.path, "itl_quantiles") is None:  # every gap, sorted
            return ms, (ms.size - np.arange(ms.size)) / ms.size
        q = self.table("itl_quantiles")
        n = int(q.loc[(q["arm"] == arm) & (q["point_id"] == point_id), "num_gaps"].iloc[0])
        return ms, np.maximum(1.0 - y, 1.0 / n)

    def itl_percentiles(self, arm: str, point_id: int,
                        percentiles: tuple[float, ...]) -> list[float]:
        """ITL percentiles (ms) of every gap pooled over repeats, by numpy's linear
        interpolation: exact from token rows, and from ``itl_quantiles`` exact at its
        quantiles (p50, p90, p99, p99.9 ...), interpolated between them."""
        y, ms = self.itl_distribution(arm, point_id)
        if not ms.size:
            return [float("nan")] * len(percentiles)
        if find_table(self.path, "itl_quantiles") is None:  # every gap
            return [float(v) for v in np.percentile(ms, percentiles)]
        return [float(v) for v in np.interp(np.asarray(percentiles) / 100, y, ms)]

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
    missing = [name for name in REQUIRED_FILES if not (p / name).exists()]
    missing += [f"{name}.parquet (or .csv)" for name in REQUIRED_TABLES
                if find_table(p, name) is None]
    if missing:
        raise UserError("run_dir", f"{p}: missing {missing[0]}; is this a loopserve run "
                        "folder?")
    try:
        summary = read_json(p / "summary.json")
        scenario = yaml.safe_load(read_text(p / "scenario.yaml"))
        env_path = p / "env.json"
        env = read_json(env_path) if env_path.is_file() else {}
    except FileReadError as err:
        raise UserError("run_dir", str(err)) from None
    except yaml.YAMLError as err:
        raise UserError("run_dir", f"{p / 'scenario.yaml'}: not YAML ({err})") from None
    try:
        _SUMMARY.validate_python(summary)
    except ValidationError as err:
        from sim.profile_file import validation_line  # only on this error path

        raise UserError("run_dir", f"{p / 'summary.json'}: not the shape a loopserve run "
                        f"writes: {validation_line(err)}") from None
    for name, doc in (("scenario.yaml", scenario), ("env.json", env)):
        if not isinstance(doc, dict):
            raise UserError("run_dir", f"{p / name}: must hold a mapping, not "
                            f"{type(doc).__name__}")
    return RunData(p, summary, scenario, env, label=label or p.name)


def _read(path: Path, columns: Sequence[str] | None, where: dict[str, Any]) -> pd.DataFrame:
    try:
        df = read_table(path, columns, where)
    except (OSError, ValueError) as err:
        raise UserError("run_dir", f"{path}: cannot read ({err})") from None
    if "arm" in df:
        df["arm"] = df["arm"].astype(str)
    return df


def _load_table(folder: Path, name: str) -> pd.DataFrame:
    path = find_table(folder, name)
    if path is None:
        if name in _OPTIONAL_TABLES:
            return pd.DataFrame({c: [] for c in _OPTIONAL_TABLES[name]})
        raise UserError("run_dir", f"{folder}: missing {name}.parquet (or .csv)")
    return _read(path, None, {})
