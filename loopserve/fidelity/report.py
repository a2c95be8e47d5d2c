"""``report.html`` of a fidelity run: per-arm metric errors, per-step errors, the two
timelines of each arm one above the other on the same time axis, and the batch-sequence
comparison. Self-contained (figures inlined as PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from loopserve.fidelity.json_types import ErrorStats, FidelityDoc
from loopserve.fidelity.tail import edge_text, reading
from loopserve.fidelity.world import WorldRun
from loopserve.report.page import render
from loopserve.report.style import png_bytes
from loopserve.report.timeline import KIND_COLORS, KIND_LABELS, MS, draw_lane
from loopserve.schema.scenario import Scenario
from sim.cost.base import SplitCostModel


def _lane(ax: Axes, run: WorldRun, label: str) -> None:
    rec = run.records
    injected = {q.request_id for q in rec.requests if q.injected}
    draw_lane(ax, ((s.start_s, s.end_s, s.kind) for s in rec.steps),
              (t.time_s for t in rec.tokens if t.request_id not in injected),
              ((q.arrival_s, q.first_token_s) for q in rec.requests
               if q.injected and q.first_token_s is not None), label)


def _zoom(run: WorldRun) -> tuple[float, float] | None:
    inj = [q for q in run.records.requests if q.injected and q.first_token_s is not None]
    if not inj:
        return None
    first = min(inj, key=lambda q: q.arrival_s)
    assert first.first_token_s is not None
    span = first.first_token_s - first.arrival_s
    return (max(0.0, first.arrival_s - 0.3 * span) * MS,
            (first.first_token_s + 0.3 * span) * MS)


def paired_timeline_figure(arm: str, sim: WorldRun, real: WorldRun) -> Figure:
    """Sim above measured on one time axis: the whole run, then a zoom on the first injected
    prompt (window taken from the measured run)."""
    zoom = _zoom(real)
    rows = 4 if zoom else 2
    fig, axes = plt.subplots(rows, 1, figsize=(13, 1.1 * rows + 1.2), layout="constrained",
                             squeeze=False)
    end = max(real.records.steps[-1].end_s if real.records.steps else 0.0,
              sim.records.steps[-1].end_s if sim.records.steps else 0.0) * MS
    panels = [((0.0, end or 1.0), "")] + ([(zoom, " (zoom: first injected prompt)")]
                                          if zoom else [])
    for p, (window, note) in enumerate(panels):
        for j, (run, label) in enumerate(((sim, "simulated"), (real, "measured"))):
            ax = axes[2 * p + j, 0]
            _lane(ax, run, label)
            ax.set_xlim(*window)
            if j == 0:
                ax.tick_params(labelbottom=False)
            else:
                ax.set_xlabel(f"time (ms){note}")
    fig.suptitle(f"{arm}: simulated vs measured timeline", fontsize=10)
    handles = [Patch(color=c, label=KIND_LABELS[k]) for k, c in KIND_COLORS.items()]
    fig.legend(handles=handles, loc="outside lower center", ncol=6, fontsize=8, frameon=False)
    return fig


def scatter_figure(real: list[WorldRun], cost: SplitCostModel) -> Figure:
    """Predicted vs measured time of every measured step, by kind of core call."""
    fig, ax = plt.subplots(figsize=(6.5, 5.5), layout="constrained")
    lo, hi = np.inf, 0.0
    for kind, color in KIND_COLORS.items():
        pts = [((s.end_s - s.start_s) * 1e3, p * 1e3)
               for r in real for s, p in zip(r.records.steps, r.predict(cost), strict=True)
               if s.kind == kind and s.end_s > s.start_s]
        if pts:
            m, p = np.array(pts).T
            ax.scatter(m, p, s=6, color=color, alpha=0.5, label=KIND_LABELS[kind])
            lo, hi = min(lo, m.min(), p.min()), max(hi, m.max(), p.max())
    if hi > 0:
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("measured execute (ms)")
    ax.set_ylabel("predicted (ms)")
    ax.legend(fontsize=8, markerscale=2)
    return fig


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _arm_rows(result: FidelityDoc) -> list[list[str]]:
    spread = result.get("measured_repeat_spread") or {}
    speed = result.get("at_run_speed")
    at_speed = (speed.get("arms") if speed else None) or {}
    rows = []
    for arm, metrics in result["arms"].items():
        for name, v in metrics.items():
            sp = spread.get(arm, {}).get(name)
            at = at_speed.get(arm, {}).get(name)
            rows.append([arm, name, _num(v["sim"]), _num(v["measured"]), _pct(v["rel_error"]),
                         "-" if sp is None else f"{100 * sp:.1f}%",
                         _pct(None if at is None else at["rel_error"])])
    return rows


def _step_rows(result: FidelityDoc) -> list[list[str]]:
    errs = result["step_errors"]
    groups: list[tuple[str, ErrorStats]] = [("all steps", errs["all"])]
    groups += [(f"kind {k}", v) for k, v in errs["by_kind"].items()]
    groups += [(f"stage {k}", v) for k, v in errs["by_stage"].items()]
    groups += [("all steps vs thread CPU time", errs["vs_cpu_time"]),
               ("host gap between steps", result["host_gap"])]
    return [[name, str(e["count"]),
             "-" if e["mape"] is None else f"{100 * e['mape']:.1f}%",
             "-" if e["max_error"] is None else f"{100 * e['max_error']:.1f}%",
             _pct(e["median_error"]), f"{e['predicted_s']:.3f}", f"{e['measured_s']:.3f}"]
            for name, e in groups]


def _tail_rows(result: FidelityDoc) -> list[list[Any]]:
    sec = result["tail"]
    rows: list[list[Any]] = []
    for r in sec["runs"]:
        kinds = [f"{k}: {v['steps']:.2f}, {v['measured_ms']:.1f} / {v['predicted_ms']:.1f}, "
                 f"x{_num(v['tail_ratio'])} (x{_num(v['run_ratio'])})"
                 for k, v in r["by_kind"].items()]
        edge = edge_text(r, sec["percentile"])
        rows.append([r["arm"], str(r["repeat"]), f"{r['num_tail']} of {r['num_intervals']}",
                     f"{r['measured_ms']:.1f}", f"{r['predicted_ms']:.1f}", kinds,
                     reading(r) + (f"; {edge}" if edge else "")])
    return rows


def _batch_rows(result: FidelityDoc) -> list[list[Any]]:
    return [[r["arm"], str(r["point_id"]), str(r["repeat"]), str(r["num_sim"]),
             str(r["num_measured"]), "yes" if r["same"] else "NO",
             "-" if r["same"] else [f"step {r['first_divergence']}: sim {r.get('sim_batch')}",
                                    f"measured {r.get('measured_batch')}"]]
            for r in result["batches"]["runs"]]


def write_fidelity_report(path: Path, scn: Scenario, result: FidelityDoc, sim: list[WorldRun],
                          real: list[WorldRun], cost: SplitCostModel) -> None:
    """Render the self-contained report (``loopserve/report/templates/fidelity.html.j2``)."""
    ref = result["reference_point_id"]
    speed = result.get("at_run_speed")
    ratio = speed.get("step_time_ratio") if speed else None
    timelines = []
    for arm in scn.arms:
        pair = [(s, r) for s, r in zip(sim, real, strict=True)
                if s.spec.arm == arm and s.spec.point_id == ref]
        if pair:
            timelines.append(png_bytes(paired_timeline_figure(arm, *pair[0])))
    path.write_text(render(
        "fidelity.html.j2", name=scn.name, target=result["target"], profile=result["profile"],
        held_out=_pct(result["profile"]["held_out_mape"]),
        slowdown=result["machine"]["slowdown_vs_calibration"],
        contention=result["contended_step_fraction"],
        ratio="-" if ratio is None else f"{ratio:.3f}", arms=_arm_rows(result),
        steps=_step_rows(result), scatter=png_bytes(scatter_figure(real, cost)),
        tail=result["tail"], tail_rows=_tail_rows(result), timelines=timelines,
        batches=result["batches"], batch_rows=_batch_rows(result)), encoding="utf-8")
