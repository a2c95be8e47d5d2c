"""summary.json rows (docs/design.md): one per run, and medians per (arm, point) over repeats;
``exit_depth_counts``: per (point, arm), how many decode tokens ran 1, 2, ..., D loops, summed
over repeats (D numbers per arm and point, so the report plots exit depths without the
per-token table; the first output token of a request always runs all D loops, from the
prompt, and is left out, as in fidelity's exits section).

Medians use the valid repeats when there are any (an invalid run is reported, never silently
mixed into the comparison), else all repeats. Every median carries its spread over those
repeats (``spread``, mirroring the metrics' keys: ``loopserve.stats``). For the simulator
``wall_s`` is null here so the file stays byte-identical across runs; the measured wall time
goes to env.json.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NotRequired, TypedDict, cast

import numpy as np

from loopserve.plan import Plan
from loopserve.plan.sweep import PointRow
from loopserve.stats import METHOD, Spread, spreads
from loopserve.stats.metrics import Metrics, RunResult

# Summary fields that are not metrics (copied, never averaged).
KEY_FIELDS = ("arm", "target", "point_id", "repeat", "valid", "invalid_reason")


class RunRow(Metrics):
    """One ``runs`` entry: keys and validity first, then the metrics, then ``wall_s``."""

    arm: str
    target: str
    point_id: int
    repeat: int
    valid: bool
    invalid_reason: str | None
    wall_s: float | None


class MedianRow(Metrics):
    """One ``medians`` entry: per (point, arm), every metric's median over the repeats, and
    ``spread``: each median's spread, keyed as the metrics are (``spread["itl_ms"]["p99"]``,
    ``spread["output_tok_s"]``)."""

    arm: str
    target: str
    point_id: int
    num_repeats: int
    num_valid: int
    valid: bool
    invalid_reason: str | None
    wall_s: float | None
    spread: dict[str, Spread | dict[str, Spread]]


class Summary(TypedDict):
    """The whole summary.json document (``spread_method`` says how spreads are computed)."""

    points: list[PointRow]
    runs: list[RunRow]
    medians: list[MedianRow]
    spread_method: str
    exit_depth_counts: NotRequired[list[ExitDepthCounts]]


def run_row(result: RunResult, target: str) -> RunRow:
    """One ``runs`` entry: keys, validity, the metrics and wall_s (null for sim)."""
    s = result.spec
    metrics = cast(Metrics, _clean(result.metrics))  # the same keys, JSON-safe values
    return {
        "arm": s.arm,
        "target": target,
        "point_id": s.point_id,
        "repeat": s.repeat,
        "valid": result.valid,
        "invalid_reason": "; ".join(result.invalid_reasons) or None,
        **metrics,
        "wall_s": None if target == "sim" else result.records.wall_s,
    }


def median_rows(runs: Sequence[RunRow], arms: Sequence[str]) -> list[MedianRow]:
    """Per (point, arm), in point then arm order: medians of every metric over repeats."""
    groups: dict[tuple[int, str], list[RunRow]] = {}
    for row in runs:
        groups.setdefault((row["point_id"], row["arm"]), []).append(row)
    out = []
    for point_id in sorted({p for p, _ in groups}):
        for arm in arms:
            group = groups.get((point_id, arm))
            if group:
                out.append(_median_row(group))
    return out


def _median_row(group: list[RunRow]) -> MedianRow:
    valid = [r for r in group if r["valid"]]
    use: list[dict[str, object]] = [dict(r) for r in (valid or group)]
    first = group[0]
    row: dict[str, object] = {
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
    spread: dict[str, object] = {}
    for key, value in first.items():
        if key in KEY_FIELDS:
            continue
        if isinstance(value, dict):
            cols = {k: [_item(r[key], k) for r in use] for k in value}
            row[key] = {k: _median(col) for k, col in cols.items()}
            spread[key] = dict(zip(cols, spreads(list(cols.values())), strict=True))
        else:
            row[key] = _median(r[key] for r in use)
            spread[key] = spreads([[r[key] for r in use]])[0]
    row["spread"] = spread
    return cast(MedianRow, row)  # the run rows' keys, in their order, then spread


def _item(value: object, key: str) -> object:
    assert isinstance(value, dict)
    return value[key]


def _median(values: Iterable[object]) -> float | int | None:
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not nums:
        return None
    m = float(np.median(nums))
    if all(isinstance(v, int) for v in nums) and m.is_integer():
        return int(m)
    return m



class ExitDepthCounts(TypedDict):
    """One entry: ``counts[d - 1]`` decode tokens ran ``d`` loops."""

    point_id: int
    arm: str
    counts: list[int]


def exit_depth_counts(results: Sequence[RunResult], arms: Sequence[str],
                      num_depths: int) -> list[ExitDepthCounts]:
    """Entries in point then arm order (the order of summary.json's medians)."""
    sums: dict[tuple[int, str], np.ndarray] = {}
    for r in results:
        counts = sums.setdefault((r.spec.point_id, r.spec.arm),
                                 np.zeros(num_depths, dtype=np.int64))
        toks = r.records.tokens
        decoded = np.asarray(toks.index, dtype=np.int64) > 0
        np.add.at(counts, np.asarray(toks.exit_depth, dtype=np.int64)[decoded] - 1, 1)
    return [{"point_id": p, "arm": arm, "counts": sums[p, arm].tolist()}
            for p in sorted({p for p, _ in sums}) for arm in arms if (p, arm) in sums]


def _clean(value: object) -> object:
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


def build_summary(plan: Plan, results: Sequence[RunResult]) -> Summary:
    """The whole summary.json document."""
    runs = [run_row(r, plan.target) for r in results]
    return {
        "points": [p.row for p in plan.points],
        "runs": runs,
        "medians": median_rows(runs, plan.scenario.arms),
        "spread_method": METHOD,
        "exit_depth_counts": exit_depth_counts(results, plan.scenario.arms,
                                               plan.shape.num_depths),
    }
