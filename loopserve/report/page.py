"""report.html: one self-contained page (inline CSS, PNGs as base64) for one or more runs.

Sections: the runs (with the resolved cost model), a headline per sweep point, per-arm
medians at the reference point (with spreads), arm ratios, which option is better on which
metric (from the medians), the cluster configurations (runs with a cluster), the prefix cache
(runs with it on), validity with reasons, the figures, ITL percentiles to p99.9, every sweep
point, a glossary, and the resolved scenario. With several runs (e.g. sim and cpu) the tables
gain a run column and the figures overlay the runs.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from loopserve.outputs.rundata import RunData
from loopserve.report.exits import exit_depth_figure
from loopserve.report.glossary import glossary_section
from loopserve.report.headline import headline_section
from loopserve.report.itl import itl_tail_figure, itl_tail_section
from loopserve.report.markup import CSS, esc
from loopserve.report.plots import png_bytes, sweep_figure, swept_fields, ttft_figure
from loopserve.report.sections import (
    medians_section,
    points_section,
    prefix_section,
    ratios_section,
    validity_section,
    verdict_section,
)
from loopserve.report.timeline import timeline_figure


@dataclass(frozen=True)
class FigureFile:
    filename: str
    title: str
    png: bytes


def make_figures(runs: Sequence[RunData]) -> list[FigureFile]:
    """Every figure of the report, rendered to PNG."""
    figs = [
        FigureFile("timeline.png", "Step timeline per arm", png_bytes(timeline_figure(runs))),
        FigureFile("itl_cdf.png", "ITL tail per arm (1 - CDF)",
                   png_bytes(itl_tail_figure(runs))),
        FigureFile("ttft.png", "TTFT per arm", png_bytes(ttft_figure(runs))),
    ]
    if (exits := exit_depth_figure(runs)) is not None:
        figs.append(FigureFile("exit_depths.png", "Loops per output token per arm",
                               png_bytes(exits)))
    fields: list[str] = []
    for run in runs:
        fields += [f for f in swept_fields(run) if f not in fields]
    for field in fields:
        safe = "".join(c if c.isalnum() else "_" for c in field)
        figs.append(FigureFile(f"sweep_{safe}.png", f"Metrics against {field}",
                               png_bytes(sweep_figure(runs, field))))
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


def cost_model_text(summary: Any) -> str:
    """summary.json's resolved ``cost_model`` in words, "unknown" when the file has none."""
    cm = summary.get("cost_model") if isinstance(summary, dict) else None
    if not isinstance(cm, dict) or not cm.get("kind"):
        return "unknown"
    parts = [str(cm["kind"])]
    if cm.get("requested") and cm["requested"] != cm["kind"]:
        parts[0] += f" (requested {cm['requested']})"
    if cm.get("profile"):
        sha = cm.get("profile_sha256")
        parts.append(f"profile {cm['profile']}" + (f" (sha256 {str(sha)[:12]})" if sha else ""))
    if cm.get("hardware"):
        parts.append(f"hardware {cm['hardware']}")
    return ", ".join(parts)


def _cost_words(summary: Any, cost: Any, scenario: Any) -> str:
    """The header's cost model: the resolved one, else what the scenario asked for."""
    text = cost_model_text(summary)
    if text == "unknown":
        text += (f" (scenario: {cost.get('kind')}, hardware {scenario.get('hardware')})")
    return f"cost model: <b>{esc(text)}</b>"


def _exit_note(env: dict[str, Any]) -> str:
    """The warning a run whose adaptive exits no measured profile drove carries (env.json's
    ``exit_model`` notes, ``loopserve.plan.exit_source``)."""
    models = env.get("exit_model") or {}
    notes = {m.get("note") for m in models.values() if isinstance(m, dict) and m.get("note")}
    return "".join(f"<br><b>note:</b> {esc(n)}" for n in sorted(notes))


def _runs_header(runs: Sequence[RunData]) -> str:
    items = []
    for run in runs:
        s, env = run.scenario, run.env
        git = env.get("git", {})
        cost = s.get("cost", {})
        real = env.get("runner")  # real targets: the attention backend that ran
        engine = (f"attention {esc(real.get('attention_backend'))}, {esc(real.get('dtype'))}; "
                  if real else "")
        items.append(
            f"<li><b>{esc(run.label)}</b>: target <b>{esc(run.target)}</b>, model "
            f"{esc(s.get('model'))}, {_cost_words(run.summary, cost, s)}, "
            f"arms {esc(', '.join(run.arms))}, "
            f"{len(run.points)} point(s) x {esc(s.get('repeats', 1))} repeat(s); {engine}"
            f"run {esc(env.get('run_id', run.path.name))} at {esc(env.get('started_at', '?'))}, "
            f"commit {esc((git.get('commit') or '?')[:12])}{' (dirty)' if git.get('dirty') else ''}"
            f"{_exit_note(env)}</li>")
    return "<ul>" + "".join(items) + "</ul>"


def render_html(runs: Sequence[RunData], figs: Sequence[FigureFile]) -> str:
    """The whole page; images embedded, nothing fetched."""
    names = ", ".join(dict.fromkeys(run.name for run in runs))
    fig_html = "".join(
        f"<h3>{esc(f.title)}</h3><img alt='{esc(f.title)}' src='data:image/png;base64,"
        f"{base64.b64encode(f.png).decode()}'>" for f in figs)
    scenarios = "".join(
        f"<h3>{esc(run.label)}</h3><pre>{esc(yaml.safe_dump(run.scenario, sort_keys=False))}</pre>"
        f"<details><summary>env.json</summary><pre>{esc(json.dumps(run.env, indent=2))}</pre>"
        "</details>" for run in runs)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>loopserve report: {esc(names)}</title><style>{CSS}</style></head><body>"
        f"<h1>loopserve report: {esc(names)}</h1>{_runs_header(runs)}"
        f"{headline_section(runs)}{_cluster_section(runs)}"
        f"{medians_section(runs)}{ratios_section(runs)}{verdict_section(runs)}"
        f"{prefix_section(runs)}{validity_section(runs)}<h2>Figures</h2>{fig_html}"
        f"{itl_tail_section(runs)}{points_section(runs)}{glossary_section()}"
        f"<h2>Resolved scenario</h2>{scenarios}</body></html>\n"
    )


def _cluster_section(runs: Sequence[RunData]) -> str:
    # Only cluster runs have the section; its module loads for them.
    if not any("num_replicas" in m for run in runs for m in run.summary["medians"]):
        return ""
    from loopserve.report.cluster import cluster_section

    return cluster_section(runs)
