"""``report.html`` of a fidelity run: per-arm metric errors, per-step errors, the two
timelines of each arm one above the other on the same time axis, and the batch-sequence
comparison. Self-contained (figures inlined as PNG)."""

from __future__ import annotations

import base64
import html
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from loopserve.fidelity.doc import ErrorStats, FidelityDoc
from loopserve.fidelity.tail import edge_text, reading
from loopserve.fidelity.world import WorldRun
from loopserve.report.style import png_bytes
from loopserve.report.timeline import KIND_COLORS, KIND_LABELS, MS, draw_lane
from loopserve.schema.scenario import Scenario
from sim.cost.calibrated import CalibratedCost


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


def scatter_figure(real: list[WorldRun], cost: CalibratedCost) -> Figure:
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


def _img(fig: Figure) -> str:
    data = base64.b64encode(png_bytes(fig)).decode()
    return f'<img src="data:image/png;base64,{data}" style="max-width:100%">'


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _arms_table(result: FidelityDoc) -> str:
    spread = result.get("measured_repeat_spread") or {}
    speed = result.get("at_run_speed") or {}
    at_speed = speed.get("arms") or {}
    ratio = speed.get("step_time_ratio")
    rows = ["<tr><th>arm</th><th>metric</th><th>sim</th><th>measured</th><th>error</th>"
            "<th>measured spread over repeats</th><th>error at the runs' own speed (profile "
            f"x{'-' if ratio is None else f'{ratio:.3f}'}; diagnostic)</th></tr>"]
    for arm, metrics in result["arms"].items():
        for name, v in metrics.items():
            sp = spread.get(arm, {}).get(name)
            at = at_speed.get(arm, {}).get(name)
            rows.append(f"<tr><td>{html.escape(arm)}</td><td>{name}</td><td>{_num(v['sim'])}"
                        f"</td><td>{_num(v['measured'])}</td><td>{_pct(v['rel_error'])}</td>"
                        f"<td>{'-' if sp is None else f'{100 * sp:.1f}%'}</td>"
                        f"<td>{_pct(None if at is None else at['rel_error'])}</td></tr>")
    return "<table>" + "".join(rows) + "</table>"


def _steps_table(result: FidelityDoc) -> str:
    rows = ["<tr><th>group</th><th>steps</th><th>MAPE</th><th>worst</th><th>median error</th>"
            "<th>predicted total (s)</th><th>measured total (s)</th></tr>"]
    errs = result["step_errors"]
    groups: list[tuple[str, ErrorStats]] = [("all steps", errs["all"])]
    groups += [(f"kind {k}", v) for k, v in errs["by_kind"].items()]
    groups += [(f"stage {k}", v) for k, v in errs["by_stage"].items()]
    groups += [("all steps vs thread CPU time", errs["vs_cpu_time"]),
               ("host gap between steps", result["host_gap"])]
    for name, e in groups:
        mape = "-" if e["mape"] is None else f"{100 * e['mape']:.1f}%"
        worst = "-" if e["max_error"] is None else f"{100 * e['max_error']:.1f}%"
        rows.append(f"<tr><td>{name}</td><td>{e['count']}</td><td>{mape}</td><td>{worst}</td>"
                    f"<td>{_pct(e['median_error'])}</td><td>{e['predicted_s']:.3f}</td>"
                    f"<td>{e['measured_s']:.3f}</td></tr>")
    return "<table>" + "".join(rows) + "</table>"


def _tail_table(result: FidelityDoc) -> str:
    sec = result["tail"]
    rows = ["<tr><th>arm</th><th>repeat</th><th>intervals</th><th>measured (ms)</th>"
            "<th>predicted (ms)</th><th>kind: steps, measured / predicted ms, tail ratio "
            "(whole-run ratio)</th><th>reading</th></tr>"]
    for r in sec["runs"]:
        kinds = "<br>".join(
            f"{html.escape(k)}: {v['steps']:.2f}, {v['measured_ms']:.1f} / "
            f"{v['predicted_ms']:.1f}, x{_num(v['tail_ratio'])} (x{_num(v['run_ratio'])})"
            for k, v in r["by_kind"].items())
        edge = edge_text(r, sec["percentile"])
        text = reading(r) + (f"; {edge}" if edge else "")
        rows.append(f"<tr><td>{html.escape(r['arm'])}</td><td>{r['repeat']}</td>"
                    f"<td>{r['num_tail']} of {r['num_intervals']}</td>"
                    f"<td>{r['measured_ms']:.1f}</td><td>{r['predicted_ms']:.1f}</td>"
                    f"<td>{kinds}</td><td>{html.escape(text)}</td></tr>")
    note = (f"<p>The intervals at or above each run's measured ITL p{sec['percentile']:g}, "
            "split by step kind, each kind's time beside the profile's prediction for the same "
            "steps. A tail ratio more than "
            f"{sec['burst_ratio']}x the kind's whole-run ratio reads as bursts of machine "
            "noise; otherwise the excess is the run's own (a cost term or the machine's "
            "overall speed).</p>")
    return note + "<table>" + "".join(rows) + "</table>"


def _batches_html(result: FidelityDoc) -> str:
    b = result["batches"]
    note = ("The workload has timed arrivals, so the schedule may depend on timing; a "
            "divergence shows where." if b["timing_dependent_schedule"] else
            "Closed workload (arrivals at t=0 or triggered by tokens): the two batch "
            "sequences must be identical.")
    rows = ["<tr><th>arm</th><th>point</th><th>repeat</th><th>sim steps</th>"
            "<th>measured steps</th><th>same</th><th>first divergence</th></tr>"]
    for r in b["runs"]:
        where = "-" if r["same"] else (
            f"step {r['first_divergence']}: sim {html.escape(str(r.get('sim_batch')))}"
            f"<br>measured {html.escape(str(r.get('measured_batch')))}")
        rows.append(f"<tr><td>{html.escape(r['arm'])}</td><td>{r['point_id']}</td>"
                    f"<td>{r['repeat']}</td><td>{r['num_sim']}</td><td>{r['num_measured']}</td>"
                    f"<td>{'yes' if r['same'] else 'NO'}</td><td>{where}</td></tr>")
    return f"<p>{note}</p><table>{''.join(rows)}</table>"


_CSS = ("body{font-family:sans-serif;margin:2em;max-width:1300px}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;"
        "font-size:13px}th{background:#f3f3f3}td:first-child{text-align:left}")


def write_fidelity_report(path: Path, scn: Scenario, result: FidelityDoc, sim: list[WorldRun],
                 real: list[WorldRun], cost: CalibratedCost) -> None:
    """Render the self-contained report."""
    prof = result["profile"]
    ref = result["reference_point_id"]
    contention = result["contended_step_fraction"]
    parts = [
        f"<h1>Fidelity: {html.escape(scn.name)} (sim vs {html.escape(result['target'])})</h1>",
        f"<p>Profile {html.escape(prof['hardware'])}-{html.escape(prof['model'])} measured on "
        f"{html.escape(str(prof['device']))} ({html.escape(str(prof['date']))}); held-out "
        f"per-step MAPE at calibration {_pct(prof['held_out_mape'])}. Errors are "
        "(sim - measured) / measured; metrics are medians over repeats at the reference "
        "point.</p>",
    ]
    slow = result["machine"]["slowdown_vs_calibration"]
    if slow:
        parts.append("<p>Machine speed now vs at calibration (reference steps timed just "
                     "before and after the measured runs; above 1 = slower now, a bias the "
                     "profile cannot see): " + ", ".join(
                         f"{html.escape(k)} x{v:.2f}" for k, v in slow.items()) + "</p>")
    if contention is not None:
        parts.append(f"<p>{100 * contention:.1f}% of measured steps ran over 1.15x their "
                     "thread CPU time (the machine was busy with other work then).</p>")
    parts += ["<h2>Per-arm metrics</h2>", _arms_table(result),
              "<h2>Per-step time: predicted vs measured execute</h2>", _steps_table(result),
              _img(scatter_figure(real, cost)),
              "<h2>The slowest token intervals</h2>", _tail_table(result), "<h2>Timelines</h2>"]
    for arm in scn.arms:
        pair = [(s, r) for s, r in zip(sim, real, strict=True)
                if s.spec.arm == arm and s.spec.point_id == ref]
        if pair:
            parts.append(_img(paired_timeline_figure(arm, *pair[0])))
    parts += ["<h2>Batch sequences</h2>", _batches_html(result)]
    doc = (f"<!doctype html><html><head><meta charset='utf-8'><title>fidelity "
           f"{html.escape(scn.name)}</title><style>{_CSS}</style></head><body>"
           + "\n".join(parts) + "</body></html>\n")
    path.write_text(doc, encoding="utf-8")
