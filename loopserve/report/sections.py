"""The report's sections as data for ``templates/report.html.j2``: the headlines, per-arm
medians (with spreads), arm ratios, verdicts, the prefix cache, validity, the ITL tail and
every sweep point. Each function takes the runs and returns its section, or None (or an empty
list) when the runs have nothing for it; the template writes the HTML.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from loopserve.outputs.rundata import RunData
from loopserve.report.compare import (
    DESCRIPTIVE,
    METRICS,
    arm_ratios,
    field_verdicts,
    point_headline,
    verdict_sentences,
)
from loopserve.stats.metrics import metric
from loopserve.stats.population import itl_key
from loopserve.stats.summary import MedianRow

TAIL_PERCENTILES = (50.0, 90.0, 99.0, 99.9)
PREFIX_FLAG = "cache.enable_prefix_caching"


def num(x: float | None, digits: int = 4) -> str:
    """A number to ``digits`` significant digits; "–" when there is none."""
    return "–" if x is None else f"{x:.{digits}g}"


@dataclass(frozen=True)
class Cell:
    """A table cell with a look: ``cls`` colours it ("ok", "bad"), ``note`` follows it in
    brackets (a spread)."""

    text: str
    cls: str = ""
    note: str = ""


@dataclass
class Table:
    """A table: the first ``left`` columns are left-aligned."""

    head: Sequence[str]
    rows: list[list[Any]] = field(default_factory=list)
    left: int = 1


def point_label(run: RunData, point_id: int) -> str:
    values = run.point_values(point_id)
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "base"


def headlines(runs: Sequence[RunData]) -> list[dict[str, Any]]:
    """Per run with a headline: its title (with several runs) and (where, sentence) items,
    the reference point first; ``where`` is empty for a run with one point."""
    out = []
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
            items.append((where if len(ids) > 1 else "", text))
        if items:
            out.append({"title": run.label if len(runs) > 1 else "", "items": items})
    return out


def _valid_cell(m: MedianRow) -> Cell:
    n, ok = m.get("num_repeats", 1), m.get("num_valid", int(bool(m["valid"])))
    return Cell(f"{'valid' if m['valid'] else 'INVALID'} ({ok}/{n})",
                "ok" if m["valid"] else "bad")


def _slo_cell(m: MedianRow, slo: dict[str, Any] | None) -> Cell | str:
    if not slo:
        return "–"
    checks = []
    if slo.get("itl_p99_ms"):
        v = metric(m, itl_key(m), "p99")  # the decode population's under injection
        checks.append(v is not None and v <= slo["itl_p99_ms"])
    if slo.get("ttft_p99_ms"):
        v = metric(m, "ttft_ms", "p99")
        checks.append(v is not None and v <= slo["ttft_p99_ms"])
    return Cell("met", "ok") if all(checks) else Cell("missed", "bad")


def spread_of(m: MedianRow, key: str, sub: str | None) -> tuple[float, float] | None:
    """A median's spread from summary.json (``spread``: the 95% interval when it has one, else
    min-max), or None when the file has none or the repeats agree."""
    node: Any = cast(dict[str, Any], m).get("spread") or {}
    node = node.get(key)
    if sub is not None:
        node = node.get(sub) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return None
    lo, hi = node.get("ci95_low"), node.get("ci95_high")
    if lo is None or hi is None:
        lo, hi = node.get("min"), node.get("max")
    if lo is None or hi is None or lo == hi:
        return None
    return float(lo), float(hi)


def _with_spread(m: MedianRow, key: str, sub: str | None) -> Cell:
    spread = spread_of(m, key, sub)
    note = "" if spread is None else f"{num(spread[0], 3)}–{num(spread[1], 3)}"
    return Cell(num(metric(m, key, sub)), note=note)


def readback_note(run: RunData) -> str:
    """Which arms read the exit signal back on every loop (``readback_skip: false``, the
    RFC's starting engine) and which skip the unused ones (RFC §4)."""
    scn = run.scenario
    shared = (scn.get("scheduler") or {}).get("readback_skip", True)
    overrides = scn.get("arm_overrides") or {}
    off = [a for a in scn.get("arms", [])
           if not (overrides.get(a) or {}).get("readback_skip", shared)]
    on = [a for a in scn.get("arms", []) if a not in off]
    parts = []
    if off:
        parts.append(f"{', '.join(off)} read the exit signal back on every decode loop, "
                     "used or not (readback_skip off: the RFC's starting engine)")
    if on:
        parts.append(f"{', '.join(on)} skip the readback when no decode row needs a signal "
                     "(readback_skip on, RFC §4)")
    return "; ".join(parts)


def unequal_note(run: RunData) -> str:
    """Arms that ran unequal budget, max_num_seqs or chunk (``allow_unequal_arms``), from
    env.json's ``unequal_arms``; "" when they were equal."""
    diffs = (run.env or {}).get("unequal_arms") or {}
    return "; ".join(f"point {p}: {', '.join(d)}" for p, d in diffs.items())


def medians(runs: Sequence[RunData]) -> dict[str, Any]:
    """The per-arm medians table at each run's reference point, with its notes."""
    multi = len(runs) > 1
    table = Table(((["run"] if multi else []) + ["arm", "validity"]
                   + [m[2] for m in METRICS + DESCRIPTIVE]
                   + ["core calls", "mixed calls", "readbacks", "SLO"]), left=3 if multi else 2)
    for run in runs:
        slo = run.scenario.get("slo")
        for m in run.medians():
            cells: list[Any] = ([run.label] if multi else []) + [m["arm"], _valid_cell(m)]
            cells += [_with_spread(m, k, s) for k, s, _, _ in METRICS + DESCRIPTIVE]
            cells += [num(m.get("num_core_calls"), 8), num(m.get("num_mixed_core_calls"), 8),
                      num(m.get("num_readbacks"), 8), _slo_cell(m, slo)]
            table.rows.append(cells)
    notes = [{"run": run, "point": point_label(run, run.reference_point_id),
              "spread": run.summary.get("spread_method") or "none in this summary.json",
              "readback": readback_note(run), "unequal": unequal_note(run)} for run in runs]
    return {"table": table, "notes": notes}


def ratios(runs: Sequence[RunData]) -> list[tuple[str, Table]]:
    """Per run, the ratio of each arm pair's medians at the reference point."""
    out = []
    for run in runs:
        rows = arm_ratios(run, run.reference_point_id)
        if not rows:
            continue
        pairs = list(dict.fromkeys(r["pair"] for r in rows))
        by = {(r["pair"], r["metric"]): r for r in rows}
        table = Table(["metric", *pairs])
        for _, _, label, higher in METRICS:
            cells = [f"{label} ({'higher' if higher else 'lower'} is better)"]
            for p in pairs:
                r = by.get((p, label))
                cells.append("–" if r is None else f"{r['ratio']:.3f} ({r['better']})")
            table.rows.append(cells)
        out.append((run.label if len(runs) > 1 else "", table))
    return out


def verdicts(runs: Sequence[RunData]) -> list[dict[str, Any]]:
    """Per run and varied field: the sentences and the table of best and worst values."""
    out = []
    for run in runs:
        found = field_verdicts(run)
        for name in dict.fromkeys(v.field for v in found):
            fv = [v for v in found if v.field == name]
            table = Table(["arm", "other fields", "metric", "best", "median", "worst",
                           "median", "change"], left=3)
            table.rows = [[v.arm, v.context or "reference", v.metric,
                           "tie" if v.tie else v.best, num(v.best_value), v.worst,
                           num(v.worst_value), f"{v.change_pct:+.1f}%"] for v in fv]
            out.append({"field": name, "run": run.label if len(runs) > 1 else "",
                        "sentences": verdict_sentences(fv), "table": table})
    return out


def _uncached_point(run: RunData, point_id: int) -> int | None:
    """The point with the same values but caching off, if the run swept the flag."""
    values = run.point_values(point_id)
    if PREFIX_FLAG not in values:
        return None
    want = {**values, PREFIX_FLAG: False}
    for p in run.points:
        if dict(p["values"]) == want:
            return int(p["point_id"])
    return None


def _cell(x: object) -> str:
    if isinstance(x, int) and not isinstance(x, bool):
        return str(x)
    return num(float(x)) if isinstance(x, float) else "–"


def prefix_cache(runs: Sequence[RunData]) -> Table | None:
    """Per point and arm with ``cache.enable_prefix_caching`` on: vLLM's hit rate (hit /
    queried prompt tokens), blocks evicted, and TTFT and ITL against the same point with
    caching off when the run swept the flag; None when no run had caching on."""
    table = Table(("run", "point", "values", "arm", "queried tokens", "hit tokens", "hit rate",
                   "blocks evicted", "TTFT p50 (ms)", "uncached TTFT p50", "TTFT p50 ratio",
                   "ITL p50 (ms)", "uncached ITL p50", "ITL p99 (ms)", "uncached ITL p99"),
                  left=4)
    for run in runs:
        rows = run.summary["medians"]
        by_key: dict[tuple[int, str], MedianRow] = {(m["point_id"], m["arm"]): m for m in rows}
        for m in rows:
            if "prefix_cache_hit_tokens" not in m:
                continue
            off_id = _uncached_point(run, m["point_id"])
            off = None if off_id is None else by_key.get((off_id, m["arm"]))
            ttft, ttft_off = metric(m, "ttft_ms", "p50"), metric(off, "ttft_ms", "p50")
            values = run.point_values(m["point_id"])
            where = ", ".join(f"{k}={v}" for k, v in values.items() if k != PREFIX_FLAG)
            numbers = (
                m.get("prefix_cache_queried_tokens"), m.get("prefix_cache_hit_tokens"),
                m.get("prefix_cache_hit_rate"), m.get("prefix_cache_evicted_blocks"),
                ttft, ttft_off, None if ttft is None or not ttft_off else ttft / ttft_off,
                metric(m, "itl_ms", "p50"), metric(off, "itl_ms", "p50"),
                metric(m, "itl_ms", "p99"), metric(off, "itl_ms", "p99"))
            table.rows.append([run.label, m["point_id"], where or "base", m["arm"],
                               *(_cell(c) for c in numbers)])
    return table if table.rows else None


def validity(runs: Sequence[RunData]) -> dict[str, Any]:
    """Every invalid run with its reason, and how many runs there are."""
    table = Table(["run", "arm", "point", "repeat", "reason"], left=5)
    total = 0
    for run in runs:
        for r in run.summary["runs"]:
            total += 1
            if not r["valid"]:
                table.rows.append([run.label, r["arm"], r["point_id"], r["repeat"],
                                   Cell(str(r["invalid_reason"]), "bad")])
    return {"total": total, "table": table}


def itl_percentiles(run: RunData, arm: str) -> list[float] | None:
    """ITL p50, p90, p99, p99.9 and max (ms) at the run's reference point, or None."""
    pct = run.itl_percentiles(arm, run.reference_point_id, (*TAIL_PERCENTILES, 100.0))
    return None if math.isnan(pct[0]) else pct


def itl_tail(runs: Sequence[RunData]) -> Table | None:
    """ITL p50 to p99.9 and max per arm at each run's reference point (None without tokens)."""
    multi = len(runs) > 1
    table = Table((["run"] if multi else []) + ["arm"] + [f"p{p:g}" for p in TAIL_PERCENTILES]
                  + ["max"], left=2 if multi else 1)
    for run in runs:
        for arm in run.arms:
            pct = itl_percentiles(run, arm)
            if pct is not None:
                table.rows.append(([run.label] if multi else []) + [arm] + [num(v) for v in pct])
    return table if table.rows else None


def sweep_points(runs: Sequence[RunData]) -> Table | None:
    """Every sweep point's medians per arm; None when no run swept anything."""
    if all(len(run.points) <= 1 for run in runs):
        return None
    table = Table(["run", "point", "values", "arm", "validity", "ITL p99 (ms)",
                   "TTFT p50 (ms)", "output tok/s", "mixed calls"], left=4)
    for run in runs:
        for m in run.summary["medians"]:
            table.rows.append([run.label, m["point_id"], point_label(run, m["point_id"]),
                               m["arm"], _valid_cell(m),
                               num(metric(m, "itl_ms", "p99")), num(metric(m, "ttft_ms", "p50")),
                               num(metric(m, "output_tok_s")),
                               num(m.get("num_mixed_core_calls"), 8)])
    return table
