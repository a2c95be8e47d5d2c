"""Which option is better on which metric, computed from a run's medians (never hard-coded).

- ``arm_ratios``: per metric, one arm's median over another's at a point (e.g. A2/A0).
- ``field_verdicts``: for each swept field or variant, per arm, which value is best on each
  metric, in the slice of points through the reference point (other fields held there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopserve.outputs.rundata import RunData
from loopserve.plan.sweep import VARIANT_KEY, PointRow
from loopserve.report.plots import swept_fields
from loopserve.stats.metrics import metric

# (summary key, sub-key or None, label, higher is better)
METRICS: tuple[tuple[str, str | None, str, bool], ...] = (
    ("itl_ms", "p50", "ITL p50 (ms)", False),
    ("itl_ms", "p99", "ITL p99 (ms)", False),
    ("itl_ms", "max", "ITL max (ms)", False),
    ("tpot_ms", "mean", "TPOT mean (ms)", False),
    ("ttft_ms", "p50", "TTFT p50 (ms)", False),
    ("ttft_ms", "p99", "TTFT p99 (ms)", False),
    ("output_tok_s", None, "output tok/s", True),
    ("prompt_token_loops_s", None, "prompt token-loops/s", True),
    # RFC §6 under injected prompts: the decode population apart from the injected requests
    ("decode_itl_ms", "p99", "decode ITL p99 (ms)", False),
    ("decode_tpot_ms", "mean", "decode TPOT mean (ms)", False),
    ("injected_itl_ms", "p99", "injected ITL p99 (ms)", False),
    ("injected_tpot_ms", "mean", "injected TPOT mean (ms)", False),
)
# Shown in the medians table, never ranked: how prompt work is spread, not better or worse
# (loopserve.stats.population).
DESCRIPTIVE: tuple[tuple[str, str | None, str, bool], ...] = (
    ("prompt_depths_per_step", "mean", "prompt depths/step mean", True),
    ("prompt_depths_per_step", "max", "prompt depths/step max", True),
    ("prompt_token_loops_per_decode_gap", "p50", "prompt token-loops/decode gap p50", False),
    ("prompt_token_loops_per_decode_gap", "p99", "prompt token-loops/decode gap p99", False),
)
TIE_REL = 0.005  # within 0.5%: neither is better
ARM_PAIRS = (("mixed", "atomic"), ("mixed", "per_depth"), ("per_depth", "atomic"))


def arm_ratios(run: RunData, point_id: int) -> list[dict[str, Any]]:
    """Rows ``{pair, metric, ratio, better}`` for each arm pair present at ``point_id``."""
    med = {m["arm"]: m for m in run.medians(point_id)}
    rows = []
    for a, b in ARM_PAIRS:
        if a not in med or b not in med:
            continue
        for key, sub, label, higher in METRICS:
            va, vb = metric(med[a], key, sub), metric(med[b], key, sub)
            if va is None or vb is None or vb == 0:
                continue
            ratio = va / vb
            rows.append({"pair": f"{a}/{b}", "metric": label, "ratio": ratio,
                         "better": _better(a, b, va, vb, higher)})
    return rows


@dataclass
class Verdict:
    """For one varied field, arm and slice: the best and worst value on one metric.

    ``context`` names the values the other fields are held at (empty: the reference point).
    """

    field: str
    arm: str
    metric: str
    best: Any
    best_value: float
    worst: Any
    worst_value: float
    higher_is_better: bool
    context: str = ""

    @property
    def tie(self) -> bool:
        scale = max(abs(self.best_value), abs(self.worst_value), 1e-12)
        return abs(self.best_value - self.worst_value) / scale < TIE_REL

    @property
    def change_pct(self) -> float:
        """Best relative to worst, in percent (negative: lower)."""
        if self.worst_value == 0:
            return 0.0
        return 100.0 * (self.best_value - self.worst_value) / abs(self.worst_value)


def field_verdicts(run: RunData) -> list[Verdict]:
    """Verdicts for every field that varies across the run's points.

    Variants (the options a scenario compares) are judged in every slice of the other swept
    fields; a swept field only in the slice through the reference point.
    """
    ref = run.point_values(run.reference_point_id)
    out = []
    for field in swept_fields(run):
        slices: dict[str, list[PointRow]] = {}
        for p in run.points:
            others = {k: v for k, v in p["values"].items() if k != field}
            if field != VARIANT_KEY and any(v != ref.get(k) for k, v in others.items()):
                continue
            label = ", ".join(f"{k}={v}" for k, v in others.items()) if field == VARIANT_KEY else ""
            slices.setdefault(label, []).append(p)
        for context, pts in slices.items():
            out += _slice_verdicts(run, field, pts, context)
    return out


def _slice_verdicts(
    run: RunData, field: str, pts: list[PointRow], context: str
) -> list[Verdict]:
    out = []
    for arm in run.arms:
        med = {m["point_id"]: m for m in run.summary["medians"]
               if m["arm"] == arm and m["valid"]}
        for key, sub, label, higher in METRICS:
            vals: list[tuple[Any, float]] = []
            for p in pts:
                v = metric(med.get(p["point_id"]), key, sub)
                if v is not None:
                    vals.append((p["values"][field], v))
            if len(vals) < 2:
                continue
            ranked = sorted(vals, key=lambda xv: -xv[1] if higher else xv[1])
            out.append(Verdict(field, arm, label, ranked[0][0], ranked[0][1],
                               ranked[-1][0], ranked[-1][1], higher, context))
    return out


def verdict_sentences(verdicts: list[Verdict]) -> list[str]:
    """One sentence per (field, slice, arm): which value wins which metrics."""
    groups: dict[tuple[str, str, str], list[Verdict]] = {}
    for v in verdicts:
        groups.setdefault((v.field, v.context, v.arm), []).append(v)
    lines = []
    for (field, context, arm), vs in groups.items():
        wins: dict[str, list[str]] = {}
        ties = []
        for v in vs:
            if v.tie:
                ties.append(v.metric)
            else:
                wins.setdefault(f"{field}={v.best}", []).append(
                    f"{v.metric} ({_fmt(v.best_value)} vs {_fmt(v.worst_value)} at "
                    f"{v.worst}, {v.change_pct:+.1f}%)"
                )
        parts = [f"{value} is better on {', '.join(ms)}" for value, ms in wins.items()]
        if ties:
            parts.append(f"no difference (within {TIE_REL:.1%}) on {', '.join(ties)}")
        where = f" at {context}" if context else ""
        lines.append(f"{arm}{where}: " + "; ".join(parts) + ".")
    return lines


def _better(a: str, b: str, va: float, vb: float, higher: bool) -> str:
    if abs(va - vb) / max(abs(va), abs(vb), 1e-12) < TIE_REL:
        return "tie"
    return a if (va > vb) == higher else b


def _fmt(x: float) -> str:
    return f"{x:.4g}"
