"""report.html: one self-contained page (inline CSS, PNGs as base64) for one or more runs.

Sections: per-arm medians at the reference point, arm ratios, which option is better on which
metric (from the medians), the prefix cache (runs with it on), validity with reasons, the figures, every sweep point, and the
resolved scenario. With several runs (e.g. sim and cpu) the tables gain a run column and the
figures overlay the runs.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from loopserve.outputs.rundata import RunData
from loopserve.report.compare import METRICS, arm_ratios, field_verdicts, verdict_sentences
from loopserve.report.plots import (
    itl_cdf_figure,
    png_bytes,
    sweep_figure,
    swept_fields,
    ttft_figure,
)
from loopserve.report.prefix import HEAD as PREFIX_HEAD
from loopserve.report.prefix import prefix_cache_rows
from loopserve.report.timeline import timeline_figure
from loopserve.runs.metrics import metric
from loopserve.runs.summary import MedianRow


@dataclass(frozen=True)
class FigureFile:
    filename: str
    title: str
    png: bytes


def make_figures(runs: Sequence[RunData]) -> list[FigureFile]:
    """Every figure of the report, rendered to PNG."""
    slo = runs[0].scenario.get("slo")
    figs = [
        FigureFile("timeline.png", "Step timeline per arm", png_bytes(timeline_figure(runs))),
        FigureFile("itl_cdf.png", "ITL CDF per arm", png_bytes(itl_cdf_figure(runs, slo))),
        FigureFile("ttft.png", "TTFT per arm", png_bytes(ttft_figure(runs, slo))),
    ]
    fields: list[str] = []
    for run in runs:
        fields += [f for f in swept_fields(run) if f not in fields]
    for field in fields:
        safe = "".join(c if c.isalnum() else "_" for c in field)
        figs.append(FigureFile(f"sweep_{safe}.png", f"Metrics against {field}",
                               png_bytes(sweep_figure(runs, field, slo))))
    return figs


def write_run_report(runs: Sequence[RunData], out_dir: Path, *, write_pngs: bool) -> Path:
    """Render the figures and write ``report.html`` (and the PNGs when asked) to ``out_dir``."""
    figs = make_figures(runs)
    if write_pngs:
        for f in figs:
            (out_dir / f.filename).write_bytes(f.png)
    path = out_dir / "report.html"
    path.write_text(render_html(runs, figs))
    return path


# ---- HTML -----------------------------------------------------------------------------------
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1200px;
color:#222;padding:0 1em}h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:1.8em}table{border-collapse:collapse;margin:.6em 0;font-size:.88em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f3f3f3}
td.l,th.l{text-align:left}.bad{color:#b00020;font-weight:600}.ok{color:#1b7a1b}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}pre{background:#f7f7f7;padding:1em;
overflow-x:auto;font-size:.8em}.note{color:#555;font-size:.9em}li{margin:.25em 0}
"""


def _e(x: object) -> str:
    return html.escape(str(x))


def _num(x: float | None, digits: int = 4) -> str:
    return "–" if x is None else f"{x:.{digits}g}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(head))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>'
                         for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{th}</tr>{body}</table>"


def _valid_cell(m: MedianRow) -> str:
    n, ok = m.get("num_repeats", 1), m.get("num_valid", int(bool(m["valid"])))
    cls = "ok" if m["valid"] else "bad"
    return f'<span class="{cls}">{"valid" if m["valid"] else "INVALID"} ({ok}/{n})</span>'


def _slo_cell(m: MedianRow, slo: dict[str, Any] | None) -> str:
    if not slo:
        return "–"
    checks = []
    if slo.get("itl_p99_ms"):
        v = metric(m, "itl_ms", "p99")
        checks.append(v is not None and v <= slo["itl_p99_ms"])
    if slo.get("ttft_p99_ms"):
        v = metric(m, "ttft_ms", "p99")
        checks.append(v is not None and v <= slo["ttft_p99_ms"])
    met = all(checks)
    return f'<span class="{"ok" if met else "bad"}">{"met" if met else "missed"}</span>'


def _medians_section(runs: Sequence[RunData]) -> str:
    multi = len(runs) > 1
    head = (["run"] if multi else []) + ["arm", "validity"] + [m[2] for m in METRICS] + [
        "core calls", "mixed calls", "SLO"]
    rows = []
    for run in runs:
        slo = run.scenario.get("slo")
        for m in run.medians():
            cells = ([_e(run.label)] if multi else []) + [_e(m["arm"]), _valid_cell(m)]
            cells += [_num(metric(m, k, s)) for k, s, _, _ in METRICS]
            cells += [_num(m.get("num_core_calls"), 8), _num(m.get("num_mixed_core_calls"), 8),
                      _slo_cell(m, slo)]
            rows.append(cells)
    notes = "".join(
        f"<li>{_e(run.label)}: reference point {run.reference_point_id} "
        f"({_e(_point_label(run, run.reference_point_id))}), median of "
        f"{run.scenario.get('repeats', 1)} repeat(s)</li>" for run in runs)
    return ("<h2>Per-arm medians</h2>" + _table(head, rows, left=3 if multi else 2)
            + f'<ul class="note">{notes}</ul>')


def _ratios_section(runs: Sequence[RunData]) -> str:
    parts = []
    for run in runs:
        ratios = arm_ratios(run, run.reference_point_id)
        if not ratios:
            continue
        pairs = list(dict.fromkeys(r["pair"] for r in ratios))
        by = {(r["pair"], r["metric"]): r for r in ratios}
        rows = []
        for _, _, label, higher in METRICS:
            cells = [f"{_e(label)} ({'higher' if higher else 'lower'} is better)"]
            for p in pairs:
                r = by.get((p, label))
                cells.append("–" if r is None else f"{r['ratio']:.3f} ({_e(r['better'])})")
            rows.append(cells)
        title = f" — {_e(run.label)}" if len(runs) > 1 else ""
        parts.append(f"<h3>Arm ratios{title}</h3>" + _table(["metric", *pairs], rows))
    if not parts:
        return ""
    return ("<h2>Arm against arm</h2><p class='note'>Ratio of medians at the reference point; "
            "the arm in brackets is better on that metric.</p>" + "".join(parts))


def _verdict_section(runs: Sequence[RunData]) -> str:
    parts = []
    for run in runs:
        verdicts = field_verdicts(run)
        if not verdicts:
            continue
        title = f" — {_e(run.label)}" if len(runs) > 1 else ""
        fields = list(dict.fromkeys(v.field for v in verdicts))
        for field in fields:
            fv = [v for v in verdicts if v.field == field]
            sentences = "".join(f"<li>{_e(s)}</li>" for s in verdict_sentences(fv))
            rows = [[_e(v.arm), _e(v.context or "reference"), _e(v.metric),
                     "tie" if v.tie else _e(v.best), _num(v.best_value),
                     _e(v.worst), _num(v.worst_value), f"{v.change_pct:+.1f}%"] for v in fv]
            table = _table(["arm", "other fields", "metric", "best", "median", "worst",
                            "median", "change"], rows, left=3)
            parts.append(f"<h3>{_e(field)}{title}</h3><ul>{sentences}</ul>"
                         f"<details><summary>table</summary>{table}</details>")
    if not parts:
        return ""
    return ("<h2>Which is better, on which metric</h2><p class='note'>Variants are compared at "
            "every value of the other swept fields, a swept field with the others held at the "
            "reference point; medians of valid repeats only.</p>"
            + "".join(parts))


def _validity_section(runs: Sequence[RunData]) -> str:
    rows, total = [], 0
    for run in runs:
        for r in run.summary["runs"]:
            total += 1
            if not r["valid"]:
                rows.append([_e(run.label), _e(r["arm"]), _e(r["point_id"]), _e(r["repeat"]),
                             f'<span class="bad">{_e(r["invalid_reason"])}</span>'])
    if not rows:
        return f"<h2>Validity</h2><p class='ok'>All {total} runs are valid (RFC §6 rules).</p>"
    return (f"<h2>Validity</h2><p class='bad'>{len(rows)} of {total} runs are invalid; "
            "they are reported, and excluded from medians when a valid repeat exists.</p>"
            + _table(["run", "arm", "point", "repeat", "reason"], rows, left=5))


def _points_section(runs: Sequence[RunData]) -> str:
    if all(len(run.points) <= 1 for run in runs):
        return ""
    rows = []
    for run in runs:
        for m in run.summary["medians"]:
            rows.append([_e(run.label), _e(m["point_id"]), _e(_point_label(run, m["point_id"])),
                         _e(m["arm"]), _valid_cell(m),
                         _num(metric(m, "itl_ms", "p99")), _num(metric(m, "ttft_ms", "p50")),
                         _num(metric(m, "output_tok_s")), _num(m.get("num_mixed_core_calls"), 8)])
    head = ["run", "point", "values", "arm", "validity", "ITL p99 (ms)", "TTFT p50 (ms)",
            "output tok/s", "mixed calls"]
    return "<h2>Every sweep point</h2>" + _table(head, rows, left=4)


def _cell(x: object) -> str:
    if isinstance(x, int) and not isinstance(x, bool):
        return str(x)
    return _num(float(x)) if isinstance(x, float) else "–"


def _prefix_section(runs: Sequence[RunData]) -> str:
    rows = prefix_cache_rows(runs)
    if not rows:
        return ""
    cells = [[_e(c) for c in r[:4]] + [_cell(c) for c in r[4:]] for r in rows]
    return ("<h2>Prefix cache</h2><p class='note'>vLLM's terms: prompt tokens queried at "
            "admission and hit (served from the cache), hit rate = hit / queried; blocks "
            "evicted over all depth planes; the uncached columns are the same point with "
            "caching off.</p>" + _table(PREFIX_HEAD, cells, left=4))


def _point_label(run: RunData, point_id: int) -> str:
    values = run.point_values(point_id)
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "base"


def _runs_header(runs: Sequence[RunData]) -> str:
    items = []
    for run in runs:
        s, env = run.scenario, run.env
        git = env.get("git", {})
        cost = s.get("cost", {})
        real = env.get("runner")  # real targets: the attention backend that ran
        engine = (f"attention {_e(real.get('attention_backend'))}, {_e(real.get('dtype'))}; "
                  if real else "")
        items.append(
            f"<li><b>{_e(run.label)}</b>: target <b>{_e(run.target)}</b>, model "
            f"{_e(s.get('model'))}, hardware {_e(s.get('hardware'))}, cost "
            f"{_e(cost.get('kind'))}, arms {_e(', '.join(run.arms))}, "
            f"{len(run.points)} point(s) x {_e(s.get('repeats', 1))} repeat(s); {engine}"
            f"run {_e(env.get('run_id', run.path.name))} at {_e(env.get('started_at', '?'))}, "
            f"commit {_e((git.get('commit') or '?')[:12])}{' (dirty)' if git.get('dirty') else ''}"
            "</li>")
    return "<ul>" + "".join(items) + "</ul>"


def render_html(runs: Sequence[RunData], figs: Sequence[FigureFile]) -> str:
    """The whole page; images embedded, nothing fetched."""
    names = ", ".join(dict.fromkeys(run.name for run in runs))
    fig_html = "".join(
        f"<h3>{_e(f.title)}</h3><img alt='{_e(f.title)}' src='data:image/png;base64,"
        f"{base64.b64encode(f.png).decode()}'>" for f in figs)
    scenarios = "".join(
        f"<h3>{_e(run.label)}</h3><pre>{_e(yaml.safe_dump(run.scenario, sort_keys=False))}</pre>"
        f"<details><summary>env.json</summary><pre>{_e(json.dumps(run.env, indent=2))}</pre>"
        "</details>" for run in runs)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>loopserve report: {_e(names)}</title><style>{_CSS}</style></head><body>"
        f"<h1>loopserve report: {_e(names)}</h1>{_runs_header(runs)}"
        f"{_medians_section(runs)}{_ratios_section(runs)}{_verdict_section(runs)}"
        f"{_prefix_section(runs)}{_validity_section(runs)}<h2>Figures</h2>{fig_html}"
        f"{_points_section(runs)}"
        f"<h2>Resolved scenario</h2>{scenarios}</body></html>\n"
    )
