"""report.html: one self-contained page (inline CSS, PNGs as base64) for one or more runs.

``templates/report.html.j2`` is the page: the runs (with the resolved cost model), a headline
per sweep point, the cluster configurations (runs with a cluster), per-arm medians at the
reference point (with spreads), arm ratios, which option is better on which metric, the
prefix cache (runs with it on), validity with reasons, the figures, ITL percentiles to p99.9,
every sweep point, a glossary and the resolved scenario. ``sections`` gives the tables,
``figures`` and ``timeline`` the figures. With several runs (e.g. sim and cpu) the tables gain
a run column and the figures overlay the runs.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import yaml

from loopserve.outputs.rundata import RunData
from loopserve.report import sections
from loopserve.report.compare import swept_fields
from loopserve.report.figures import exit_depth_figure, itl_tail_figure, sweep_figure, ttft_figure
from loopserve.report.style import png_bytes
from loopserve.report.timeline import timeline_figure

TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("loopserve.report"), autoescape=True,
    undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
TEMPLATES.filters["b64"] = lambda png: base64.b64encode(png).decode()
TEMPLATES.tests["cell"] = lambda x: isinstance(x, sections.Cell)


def render(template: str, **context: Any) -> str:
    """One of ``templates/`` rendered with ``context``, ending in a newline."""
    return TEMPLATES.get_template(template).render(**context) + "\n"


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


def _run_header(run: RunData) -> dict[str, Any]:
    """One run's line at the top: target, model, cost model (the resolved one, else what the
    scenario asked for), arms, size, the attention backend of a real target, provenance, and
    the note of a run whose adaptive exits no measured profile drove (env.json's
    ``exit_model``, ``loopserve.plan.exit_source``)."""
    s, env = run.scenario, run.env
    git = env.get("git", {})
    cost = cost_model_text(run.summary)
    if cost == "unknown":
        cost += f" (scenario: {s.get('cost', {}).get('kind')}, hardware {s.get('hardware')})"
    models = env.get("exit_model") or {}
    notes = {m.get("note") for m in models.values() if isinstance(m, dict) and m.get("note")}
    return {"label": run.label, "target": run.target, "model": s.get("model"), "cost": cost,
            "arms": ", ".join(run.arms), "num_points": len(run.points),
            "repeats": s.get("repeats", 1), "runner": env.get("runner"),
            "run_id": env.get("run_id", run.path.name), "started_at": env.get("started_at", "?"),
            "commit": (git.get("commit") or "?")[:12], "dirty": bool(git.get("dirty")),
            "notes": sorted(notes)}


def _cluster(runs: Sequence[RunData]) -> list[dict[str, Any]]:
    # Only cluster runs have the section; its module loads for them.
    if not any("num_replicas" in m for run in runs for m in run.summary["medians"]):
        return []
    from loopserve.report.cluster import cluster_runs

    return cluster_runs(runs)


def render_html(runs: Sequence[RunData], figs: Sequence[FigureFile]) -> str:
    """The whole page; images embedded, nothing fetched."""
    return render(
        "report.html.j2", names=", ".join(dict.fromkeys(run.name for run in runs)),
        header=[_run_header(run) for run in runs], headlines=sections.headlines(runs),
        cluster=_cluster(runs), medians=sections.medians(runs), ratios=sections.ratios(runs),
        verdicts=sections.verdicts(runs), prefix=sections.prefix_cache(runs),
        validity=sections.validity(runs), figures=figs, itl_tail=sections.itl_tail(runs),
        points=sections.sweep_points(runs),
        scenarios=[{"label": run.label, "yaml": yaml.safe_dump(run.scenario, sort_keys=False),
                    "env": json.dumps(run.env, indent=2)} for run in runs])
