"""The headline of each sweep point: one arm against another on the three numbers a reader
asks first, ITL p99 (of the decode population when the workload injects prompts, as in
RFC §6), output tok/s and TTFT p99, e.g. "mixed cuts ITL p99 by 73% against
atomic at 1.11x output tok/s; TTFT p99 -2%".

Each change is computed from the two arms' medians (summary.json's ``medians``); its spread
is the range of the same change within each repeat, where both arms ran on the same workload
(summary.json's ``runs``, valid runs only), shown when there are two or more such repeats and
they differ. The pair is the first of ``compare.ARM_PAIRS`` whose arms both ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loopserve.outputs.rundata import RunData
from loopserve.report.compare import ARM_PAIRS
from loopserve.report.markup import esc
from loopserve.stats.metrics import metric
from loopserve.stats.population import itl_key

SAME_PCT = 0.5  # a change within 0.5% reads as "matches"
# (summary key, sub-key, label)
ITL_P99 = ("itl_ms", "p99", "ITL p99")
OUTPUT = ("output_tok_s", None, "output tok/s")
TTFT_P99 = ("ttft_ms", "p99", "TTFT p99")


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


def _ratio(ma: Any, mb: Any, key: str, sub: str | None) -> float | None:
    va, vb = metric(ma, key, sub), metric(mb, key, sub)
    return None if va is None or vb is None or vb == 0 else va / vb


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


def point_ratios(run: RunData, point_id: int, a: str, b: str
                 ) -> dict[str, Ratio] | None:
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


def headline_section(runs: Sequence[RunData]) -> str:
    """Headlines per run and point, the reference point first."""
    parts = []
    for run in runs:
        ids = [run.reference_point_id] + [p["point_id"] for p in run.points
                                           if p["point_id"] != run.reference_point_id]
        items = []
        for pid in ids:
            text = point_headline(run, pid)
            if text is None:
                continue
            values = ", ".join(f"{k}={v}" for k, v in run.point_values(pid).items())
            where = (f"point {pid}" + (f" ({values})" if values else "")
                     + (", reference" if pid == run.reference_point_id else ""))
            label = f"<b>{esc(where)}</b>: " if len(ids) > 1 else ""
            items.append(f"<li>{label}{esc(text)}</li>")
        if items:
            title = f"<h3>{esc(run.label)}</h3>" if len(runs) > 1 else ""
            parts.append(title + "<ul>" + "".join(items) + "</ul>")
    if not parts:
        return ""
    return ("<h2>Headline</h2><p class='note'>Medians over repeats; in brackets the range of "
            "the same change within each repeat (both arms on the same workload), where "
            "repeats differ.</p>" + "".join(parts))
