"""The report's tables: per-arm medians, arm ratios, verdicts, the prefix cache, validity and
every sweep point, each a function of the runs returning its HTML section ("" when empty)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from loopserve.outputs.rundata import RunData
from loopserve.report.compare import (
    DESCRIPTIVE,
    METRICS,
    arm_ratios,
    field_verdicts,
    verdict_sentences,
)
from loopserve.report.markup import esc, num, table
from loopserve.stats.metrics import metric
from loopserve.stats.population import itl_key
from loopserve.stats.summary import MedianRow


def _valid_cell(m: MedianRow) -> str:
    n, ok = m.get("num_repeats", 1), m.get("num_valid", int(bool(m["valid"])))
    cls = "ok" if m["valid"] else "bad"
    return f'<span class="{cls}">{"valid" if m["valid"] else "INVALID"} ({ok}/{n})</span>'


def _slo_cell(m: MedianRow, slo: dict[str, Any] | None) -> str:
    if not slo:
        return "–"
    checks = []
    if slo.get("itl_p99_ms"):
        v = metric(m, itl_key(m), "p99")  # the decode population's under injection
        checks.append(v is not None and v <= slo["itl_p99_ms"])
    if slo.get("ttft_p99_ms"):
        v = metric(m, "ttft_ms", "p99")
        checks.append(v is not None and v <= slo["ttft_p99_ms"])
    met = all(checks)
    return f'<span class="{"ok" if met else "bad"}">{"met" if met else "missed"}</span>'


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


def _with_spread(m: MedianRow, key: str, sub: str | None) -> str:
    text = num(metric(m, key, sub))
    spread = spread_of(m, key, sub)
    return text if spread is None else (
        f"{text} <span class='note'>[{num(spread[0], 3)}–{num(spread[1], 3)}]</span>")


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
    return esc("; ".join(parts))


def unequal_note(run: RunData) -> str:
    """The report's flag for arms that ran unequal budget, max_num_seqs or chunk
    (``allow_unequal_arms``), from env.json's ``unequal_arms``; "" when they were equal."""
    diffs = (run.env or {}).get("unequal_arms") or {}
    if not diffs:
        return ""
    text = "; ".join(f"point {p}: {', '.join(d)}" for p, d in diffs.items())
    return (f'<li><span class="bad">UNEQUAL ARMS</span> {esc(run.label)} '
            f"(allow_unequal_arms, not the RFC §6 comparison): {esc(text)}</li>")


def medians_section(runs: Sequence[RunData]) -> str:
    multi = len(runs) > 1
    head = ((["run"] if multi else []) + ["arm", "validity"]
            + [m[2] for m in METRICS + DESCRIPTIVE]
            + ["core calls", "mixed calls", "readbacks", "SLO"])
    rows = []
    for run in runs:
        slo = run.scenario.get("slo")
        for m in run.medians():
            cells = ([esc(run.label)] if multi else []) + [esc(m["arm"]), _valid_cell(m)]
            cells += [_with_spread(m, k, s) for k, s, _, _ in METRICS + DESCRIPTIVE]
            cells += [num(m.get("num_core_calls"), 8), num(m.get("num_mixed_core_calls"), 8),
                      num(m.get("num_readbacks"), 8), _slo_cell(m, slo)]
            rows.append(cells)
    notes = "".join(
        f"<li>{esc(run.label)}: reference point {run.reference_point_id} "
        f"({esc(point_label(run, run.reference_point_id))}), median of "
        f"{run.scenario.get('repeats', 1)} repeat(s); in brackets the spread "
        f"({esc(run.summary.get('spread_method') or 'none in this summary.json')}), shown "
        "where repeats differ</li>" for run in runs) + "".join(
        f"<li>{esc(run.label)}: {readback_note(run)}</li>{unequal_note(run)}" for run in runs)
    return ("<h2>Per-arm medians</h2>" + table(head, rows, left=3 if multi else 2)
            + f'<ul class="note">{notes}</ul>')


def ratios_section(runs: Sequence[RunData]) -> str:
    parts = []
    for run in runs:
        ratios = arm_ratios(run, run.reference_point_id)
        if not ratios:
            continue
        pairs = list(dict.fromkeys(r["pair"] for r in ratios))
        by = {(r["pair"], r["metric"]): r for r in ratios}
        rows = []
        for _, _, label, higher in METRICS:
            cells = [f"{esc(label)} ({'higher' if higher else 'lower'} is better)"]
            for p in pairs:
                r = by.get((p, label))
                cells.append("–" if r is None else f"{r['ratio']:.3f} ({esc(r['better'])})")
            rows.append(cells)
        title = f" — {esc(run.label)}" if len(runs) > 1 else ""
        parts.append(f"<h3>Arm ratios{title}</h3>" + table(["metric", *pairs], rows))
    if not parts:
        return ""
    return ("<h2>Arm against arm</h2><p class='note'>Ratio of medians at the reference point; "
            "the arm in brackets is better on that metric.</p>" + "".join(parts))


def verdict_section(runs: Sequence[RunData]) -> str:
    parts = []
    for run in runs:
        verdicts = field_verdicts(run)
        if not verdicts:
            continue
        title = f" — {esc(run.label)}" if len(runs) > 1 else ""
        fields = list(dict.fromkeys(v.field for v in verdicts))
        for field in fields:
            fv = [v for v in verdicts if v.field == field]
            sentences = "".join(f"<li>{esc(s)}</li>" for s in verdict_sentences(fv))
            rows = [[esc(v.arm), esc(v.context or "reference"), esc(v.metric),
                     "tie" if v.tie else esc(v.best), num(v.best_value),
                     esc(v.worst), num(v.worst_value), f"{v.change_pct:+.1f}%"] for v in fv]
            grid = table(["arm", "other fields", "metric", "best", "median", "worst",
                          "median", "change"], rows, left=3)
            parts.append(f"<h3>{esc(field)}{title}</h3><ul>{sentences}</ul>"
                         f"<details><summary>table</summary>{grid}</details>")
    if not parts:
        return ""
    return ("<h2>Which is better, on which metric</h2><p class='note'>Variants are compared at "
            "every value of the other swept fields, a swept field with the others held at the "
            "reference point; medians of valid repeats only.</p>"
            + "".join(parts))


def validity_section(runs: Sequence[RunData]) -> str:
    rows, total = [], 0
    for run in runs:
        for r in run.summary["runs"]:
            total += 1
            if not r["valid"]:
                rows.append([esc(run.label), esc(r["arm"]), esc(r["point_id"]), esc(r["repeat"]),
                             f'<span class="bad">{esc(r["invalid_reason"])}</span>'])
    if not rows:
        return f"<h2>Validity</h2><p class='ok'>All {total} runs are valid (RFC §6 rules).</p>"
    return (f"<h2>Validity</h2><p class='bad'>{len(rows)} of {total} runs are invalid; "
            "they are reported, and excluded from medians when a valid repeat exists.</p>"
            + table(["run", "arm", "point", "repeat", "reason"], rows, left=5))


def points_section(runs: Sequence[RunData]) -> str:
    if all(len(run.points) <= 1 for run in runs):
        return ""
    rows = []
    for run in runs:
        for m in run.summary["medians"]:
            rows.append([esc(run.label), esc(m["point_id"]), esc(point_label(run, m["point_id"])),
                         esc(m["arm"]), _valid_cell(m),
                         num(metric(m, "itl_ms", "p99")), num(metric(m, "ttft_ms", "p50")),
                         num(metric(m, "output_tok_s")), num(m.get("num_mixed_core_calls"), 8)])
    head = ["run", "point", "values", "arm", "validity", "ITL p99 (ms)", "TTFT p50 (ms)",
            "output tok/s", "mixed calls"]
    return "<h2>Every sweep point</h2>" + table(head, rows, left=4)


def _cell(x: object) -> str:
    if isinstance(x, int) and not isinstance(x, bool):
        return str(x)
    return num(float(x)) if isinstance(x, float) else "–"


def prefix_section(runs: Sequence[RunData]) -> str:
    # Only medians of prefix-caching runs carry its metrics; the table's module loads for them.
    if not any("prefix_cache_hit_tokens" in m for run in runs for m in run.summary["medians"]):
        return ""
    from loopserve.report.prefix import HEAD as PREFIX_HEAD
    from loopserve.report.prefix import prefix_cache_rows

    rows = prefix_cache_rows(runs)
    cells = [[esc(c) for c in r[:4]] + [_cell(c) for c in r[4:]] for r in rows]
    return ("<h2>Prefix cache</h2><p class='note'>vLLM's terms: prompt tokens queried at "
            "admission and hit (served from the cache), hit rate = hit / queried; blocks "
            "evicted over all depth planes; the uncached columns are the same point with "
            "caching off.</p>" + table(PREFIX_HEAD, cells, left=4))


def point_label(run: RunData, point_id: int) -> str:
    values = run.point_values(point_id)
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "base"
