"""What the report states about arms and options, computed from a run's medians (never
hard-coded):

- the headline of each sweep point: one arm against another on the three numbers a reader asks
  first, ITL p99 (of the decode population when the workload injects prompts, as in RFC §6),
  output tok/s and TTFT p99, e.g. "mixed cuts ITL p99 by 73% against atomic at 1.11x output
  tok/s; TTFT p99 -2%". Each change is the ratio of the two arms' medians; its spread is the
  range of the same ratio within each repeat where both arms ran valid on the same workload,
  shown when two or more such repeats differ. The pair is the first of ``ARM_PAIRS`` present.
- ``arm_ratios``: per metric, one arm's median over another's at a point (e.g. A2/A0).
- ``field_verdicts``: for each swept field or variant, per arm, which value is best on each
  metric, in the slice of points through the reference point (other fields held there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loopserve.outputs.rundata import RunData
from loopserve.plan.sweep import VARIANT_KEY, PointRow
from loopserve.stats.metrics import metric
from loopserve.stats.population import itl_key

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
SAME_PCT = 0.5  # a headline change within 0.5% reads as "matches"
ARM_PAIRS = (("mixed", "atomic"), ("mixed", "per_depth"), ("per_depth", "atomic"),
             ("wavefront", "mixed"))
# the headline's numbers: (summary key, sub-key, label)
ITL_P99 = ("itl_ms", "p99", "ITL p99")
OUTPUT = ("output_tok_s", None, "output tok/s")
TTFT_P99 = ("ttft_ms", "p99", "TTFT p99")


def swept_fields(run: RunData) -> list[str]:
    """Fields that take more than one value across the run's points."""
    fields: list[str] = []
    for p in run.points:
        for key in p["values"]:
            if key not in fields:
                fields.append(key)
    return [f for f in fields if len({repr(p["values"].get(f)) for p in run.points}) > 1]


def _ratio(ma: Any, mb: Any, key: str, sub: str | None) -> float | None:
    va, vb = metric(ma, key, sub), metric(mb, key, sub)
    return None if va is None or vb is None or vb == 0 else va / vb


@dataclass(frozen=True)
class Ratio:
    """``a / b`` of the medians, and its low and high over the paired repeats (or None)."""

    value: float
    low: float | None = None
    high: float | None = None

    @property
    def pct(self) -> float:
        return 100.0 * (self.value - 1.0)

    def has_range(self) -> bool:
        return self.low is not None and self.high is not None and self.low != self.high


def headline_pair(arms: Sequence[str]) -> tuple[str, str] | None:
    """The arms a headline compares: the first pair of ``ARM_PAIRS`` present."""
    return next(((a, b) for a, b in ARM_PAIRS if a in arms and b in arms), None)


def paired_ratios(runs: Sequence[Any], point_id: int, a: str, b: str, key: str,
                  sub: str | None) -> list[float]:
    """``a / b`` within each repeat of the point where both arms' runs are valid."""
    by = {(r["arm"], r["repeat"]): r for r in runs if r["point_id"] == point_id and r["valid"]}
    out = []
    for (arm, repeat), ra in sorted(by.items(), key=lambda kv: kv[0][1]):
        rb = by.get((b, repeat))
        if arm == a and rb is not None:
            v = _ratio(ra, rb, key, sub)
            if v is not None:
                out.append(v)
    return out


def point_ratios(run: RunData, point_id: int, a: str, b: str) -> dict[str, Ratio] | None:
    """The three ratios of the headline at ``point_id`` (None when a median is missing)."""
    med = {m["arm"]: m for m in run.medians(point_id)}
    if a not in med or b not in med:
        return None
    out = {}
    for key, sub, label in (ITL_P99, OUTPUT, TTFT_P99):
        if key == ITL_P99[0]:
            key = itl_key(med[a])  # the decode population's when prompts were injected
        value = _ratio(med[a], med[b], key, sub)
        if value is None:
            return None
        paired = paired_ratios(run.summary.get("runs", []), point_id, a, b, key, sub)
        lo, hi = (min(paired), max(paired)) if len(paired) >= 2 else (None, None)
        out[label] = Ratio(value, lo, hi)
    return out


def _pct_range(r: Ratio) -> str:
    if not r.has_range():
        return ""
    assert r.low is not None and r.high is not None
    lo, hi = 100.0 * (r.low - 1.0), 100.0 * (r.high - 1.0)
    return f" ({lo:+.0f} to {hi:+.0f}%)"


def headline_text(a: str, b: str, ratios: dict[str, Ratio]) -> str:
    """The sentence: ITL p99 change (cuts/raises/matches), throughput ratio, TTFT p99 change;
    paired-repeat ranges in brackets."""
    itl, out, ttft = ratios[ITL_P99[2]], ratios[OUTPUT[2]], ratios[TTFT_P99[2]]
    if abs(itl.pct) < SAME_PCT:
        verb = f"matches {b}'s ITL p99 (within {SAME_PCT:g}%)"
    else:
        change = "cuts" if itl.pct < 0 else "raises"
        rng = ""
        if itl.has_range():
            assert itl.low is not None and itl.high is not None
            ends = sorted(abs(100.0 * (x - 1.0)) for x in (itl.low, itl.high))
            rng = f" ({ends[0]:.0f}-{ends[1]:.0f}%)"
        verb = f"{change} ITL p99 by {abs(itl.pct):.0f}%{rng} against {b}"
    tok = f"{out.value:.2f}x"
    if out.has_range():
        assert out.low is not None and out.high is not None
        tok += f" ({out.low:.2f}-{out.high:.2f}x)"
    return f"{a} {verb} at {tok} output tok/s; TTFT p99 {ttft.pct:+.0f}%{_pct_range(ttft)}"


def point_headline(run: RunData, point_id: int) -> str | None:
    """The headline of one point, with a note when either arm's median is not valid."""
    pair = headline_pair(run.arms)
    if pair is None:
        return None
    ratios = point_ratios(run, point_id, *pair)
    if ratios is None:
        return None
    text = headline_text(*pair, ratios)
    bad = [m["arm"] for m in run.medians(point_id) if m["arm"] in pair and not m["valid"]]
    return text + (f" ({', '.join(bad)}: INVALID runs at this point)" if bad else "")


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
            rows.append({"pair": f"{a}/{b}", "metric": label, "ratio": va / vb,
                         "better": _better(a, b, va, vb, higher)})
    return rows


def _better(a: str, b: str, va: float, vb: float, higher: bool) -> str:
    if abs(va - vb) / max(abs(va), abs(vb), 1e-12) < TIE_REL:
        return "tie"
    return a if (va > vb) == higher else b


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


def _slice_verdicts(run: RunData, field: str, pts: list[PointRow], context: str
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
                    f"{v.metric} ({v.best_value:.4g} vs {v.worst_value:.4g} at "
                    f"{v.worst}, {v.change_pct:+.1f}%)")
        parts = [f"{value} is better on {', '.join(ms)}" for value, ms in wins.items()]
        if ties:
            parts.append(f"no difference (within {TIE_REL:.1%}) on {', '.join(ties)}")
        where = f" at {context}" if context else ""
        lines.append(f"{arm}{where}: " + "; ".join(parts) + ".")
    return lines
