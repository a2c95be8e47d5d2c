"""The step timeline: one lane per arm (and run), stacked on a shared time axis per run.

Each step is a bar coloured by its kind; the injected prompts' TTFT spans (arrival -> first
token) are drawn above the bars, and the output tokens of the other requests as ticks below,
so a decode stall behind prompt work shows as a gap in the ticks. Long runs are zoomed on a
window around the first injection (or on the first steps when nothing is injected).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from loopserve.outputs.rundata import RunData
from loopserve.report.style import plt

KIND_COLORS = {
    "decode": "#4c9be8",
    "prompt": "#f28e2b",
    "mixed": "#8e5ec4",
    "prefill": "#d62728",
    "prelude": "#8cd17d",
    "coda": "#b07aa1",
}
KIND_LABELS = {
    "decode": "decode-only",
    "prompt": "prompt-only",
    "mixed": "mixed",
    "prefill": "prefill (A0 atomic)",
    "prelude": "prelude",
    "coda": "coda",
}
_MAX_UNZOOMED_STEPS = 600
MS = 1e3  # the time axis is in ms; records are in seconds
STEP_COLUMNS = ("start_s", "end_s", "stage", "kind")  # what the lanes read of the steps


Lane = tuple[pd.DataFrame, pd.DataFrame]  # a lane's steps (STEP_COLUMNS) and requests


def _lanes(run: RunData) -> list[Lane]:
    """The rows each of the run's lanes draws: per arm, its first repeat at the reference
    point."""
    pid = run.reference_point_id
    steps = run.first_repeats("steps", run.arms, pid, STEP_COLUMNS)
    requests = run.first_repeats("requests", run.arms, pid)
    return [(steps[arm], requests[arm]) for arm in run.arms]


def _window(lanes: Sequence[Lane]) -> tuple[float, float, str]:
    """(start_s, end_s, zoom note) shared by every lane; the note is empty when unzoomed."""
    arrivals, firsts, ends, early_ends = [], [], [], []
    for steps, req in lanes:
        if steps.empty:
            continue
        ends.append(float(steps["end_s"].max()))
        early_ends.append(float(steps["end_s"].iloc[min(len(steps), _MAX_UNZOOMED_STEPS) - 1]))
        inj = req[req["injected"].astype(bool) & req["first_token_s"].notna()]
        if not inj.empty:  # the first injection of this lane
            first = inj.loc[inj["arrival_s"].idxmin()]
            arrivals.append(float(first["arrival_s"]))
            firsts.append(float(first["first_token_s"]))
    end = max(ends, default=1.0)
    if arrivals:
        lo, hi = min(arrivals), max(firsts)
        margin = max(0.25 * (hi - lo), 1e-6)
        start, stop = max(0.0, lo - margin), min(end, hi + margin)
        zoomed = start > 0.0 or stop < end
        return start, stop, "zoomed on the first injected prompt" if zoomed else ""
    stop = max(early_ends, default=end)
    return 0.0, stop, f"first {_MAX_UNZOOMED_STEPS} steps" if stop < end else ""


def draw_lane(ax: Axes, steps: Iterable[tuple[float, float, str]], decode_token_s: Iterable[float],
              injected: Iterable[tuple[float, float]], label: str, *,
              ttft_labels_until_s: float | None = None) -> None:
    """One lane, times in seconds drawn in ms: ``steps`` (start, end, kind) as bars coloured
    by kind, each injected prompt's (arrival, first token) as a span above them (labelled
    with its TTFT when ``ttft_labels_until_s`` is given), decode tokens as ticks below."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for start, end, kind in steps:
        spans.setdefault(kind, []).append((start * MS, (end - start) * MS))
    for kind, color in KIND_COLORS.items():
        if spans.get(kind):
            ax.broken_barh(spans[kind], (0.0, 1.0), facecolors=color, linewidth=0)
    for k, (arrival, first) in enumerate(injected):
        y = 1.3 + 0.18 * (k % 3)
        a, f = arrival * MS, first * MS
        ax.plot([a, f], [y, y], color="black", linewidth=1.6, marker="|", markersize=9)
        if ttft_labels_until_s is not None:
            ax.text(min(f, ttft_labels_until_s * MS), y, f"  TTFT {f - a:.3g} ms",
                    va="center", fontsize=7, clip_on=True)
    ticks = [t * MS for t in decode_token_s]
    ax.plot(ticks, [-0.25] * len(ticks), linestyle="none", marker="|", markersize=6,
            color="#333333", alpha=0.6)
    ax.set_ylim(-0.5, 1.95)
    ax.set_yticks([])
    ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=9)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)


def _token_ticks(run: RunData, arm: str, req: pd.DataFrame, steps: pd.DataFrame,
                 start: float, stop: float) -> pd.Series:
    """Decode tokens' times in the window; without token rows, the end of every coda step
    (where tokens come out, the injected prompts' first tokens among them)."""
    if not run.has_tokens:
        return steps.loc[steps["stage"] == "CODA", "end_s"]
    toks = run.first_repeat("tokens", arm, run.reference_point_id, ("request_id", "time_s"))
    decode_ids = set(req.loc[~req["injected"].astype(bool), "request_id"])
    return toks.loc[toks["request_id"].isin(decode_ids) & toks["time_s"].between(start, stop),
                    "time_s"]


def _tick_label(runs: Sequence[RunData], any_injected: bool) -> str:
    if not all(run.has_tokens for run in runs):
        return "coda steps (tokens out)"
    return "output tokens" if not any_injected else "decode tokens"


def timeline_figure(runs: Sequence[RunData]) -> Figure:
    """Stacked per-arm timelines at each run's reference point, first repeat."""
    multi = len(runs) > 1
    series = [(run, arm) for run in runs for arm in run.arms]
    run_lanes = [_lanes(run) for run in runs]
    lanes = [lane for each in run_lanes for lane in each]
    # lanes of one run share a time window; runs (e.g. sim vs cpu) each get their own
    windows = {id(run): _window(each) for run, each in zip(runs, run_lanes, strict=True)}
    fig, axes = plt.subplots(len(series), 1, squeeze=False,
                             figsize=(13, 1.3 * len(series) + 1.0 + 0.5 * len(runs)),
                             layout="constrained")
    any_injected = False
    for i, (ax, (run, arm), (steps, req)) in enumerate(
            zip(axes[:, 0], series, lanes, strict=True)):
        start, stop, zoomed = windows[id(run)]
        ax.set_xlim(start * MS, stop * MS)
        if i + 1 < len(series) and series[i + 1][0] is run:
            ax.tick_params(labelbottom=False)
        else:
            what = f"{run.label}: time (ms" if multi else "time (ms"
            ax.set_xlabel(what + (f", {zoomed})" if zoomed else ")"))
        steps = steps[(steps["end_s"] >= start) & (steps["start_s"] <= stop)]
        inj = req[req["injected"].astype(bool) & req["first_token_s"].notna()
                  & (req["arrival_s"] <= stop) & (req["first_token_s"] >= start)]
        any_injected |= not inj.empty
        draw_lane(ax, zip(steps["start_s"], steps["end_s"], steps["kind"], strict=True),
                  _token_ticks(run, arm, req, steps, start, stop),
                  zip(inj["arrival_s"], inj["first_token_s"], strict=True),
                  run.series_label(arm, multi), ttft_labels_until_s=stop)
    handles: list[Artist] = [Patch(color=c, label=KIND_LABELS[k]) for k, c in KIND_COLORS.items()]
    if any_injected:
        handles.append(Line2D([], [], color="black", marker="|",
                              label="injected prompt: arrival → first token"))
    handles.append(Line2D([], [], color="#333333", marker="|", linestyle="none",
                          label=_tick_label(runs, any_injected)))
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("Steps per arm (first repeat, reference point)", fontsize=11)
    return fig
