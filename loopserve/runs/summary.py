"""summary.json rows (DESIGN.md §11): one per run, and medians per (arm, point) over repeats.

Medians use the valid repeats when there are any (an invalid run is reported, never silently
mixed into the comparison), else all repeats. For the simulator ``wall_s`` is null here so
the file stays byte-identical across runs; the measured wall time goes to env.json.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from loopserve.runs.loop import RunResult
from loopserve.runs.plan import Plan

# Summary fields that are not metrics (copied, never averaged).
KEY_FIELDS = ("arm", "target", "point_id", "repeat", "valid", "invalid_reason")


def run_row(result: RunResult, target: str) -> dict[str, Any]:
    """One ``runs`` entry: keys, validity, the metrics and wall_s (null for sim)."""
    s = result.spec
    row: dict[str, Any] = {
        "arm": s.arm,
        "target": target,
        "point_id": s.point_id,
        "repeat": s.repeat,
        "valid": result.valid,
        "invalid_reason": "; ".join(result.invalid_reasons) or None,
    }
    row.update(_clean(result.metrics))
    row["wall_s"] = None if target == "sim" else result.records.wall_s
    return row


def median_rows(runs: Sequence[dict[str, Any]], arms: Sequence[str]) -> list[dict[str, Any]]:
    """Per (point, arm), in point then arm order: medians of every metric over repeats."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for row in runs:
        groups.setdefault((row["point_id"], row["arm"]), []).append(row)
    out = []
    for point_id in sorted({p for p, _ in groups}):
        for arm in arms:
            group = groups.get((point_id, arm))
            if group:
                out.append(_median_row(group))
    return out


def _median_row(group: list[dict[str, Any]]) -> dict[str, Any]:
    valid = [r for r in group if r["valid"]]
    use = valid or group
    first = group[0]
    row: dict[str, Any] = {
        "arm": first["arm"],
        "target": first["target"],
        "point_id": first["point_id"],
        "num_repeats": len(group),
        "num_valid": len(valid),
        "valid": len(valid) == len(group),
        "invalid_reason": "; ".join(
            f"repeat {r['repeat']}: {r['invalid_reason']}" for r in group if not r["valid"]
        ) or None,
    }
    for key, value in first.items():
        if key in KEY_FIELDS:
            continue
        if isinstance(value, dict):
            row[key] = {k: _median(r[key][k] for r in use) for k in value}
        else:
            row[key] = _median(r[key] for r in use)
    return row


def _median(values: Iterable[Any]) -> float | int | None:
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not nums:
        return None
    m = float(np.median(nums))
    if all(isinstance(v, int) for v in nums) and m.is_integer():
        return int(m)
    return m


def _clean(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN/inf to null."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def build_summary(plan: Plan, results: Sequence[RunResult]) -> dict[str, Any]:
    """The whole summary.json document."""
    runs = [run_row(r, plan.target) for r in results]
    return {
        "points": [{"point_id": p.point_id, "values": p.values} for p in plan.points],
        "runs": runs,
        "medians": median_rows(runs, plan.scenario.arms),
    }
