"""The report's figures: TTFT per arm, the ITL tail (1 - CDF on log-log axes, so p99 and p99.9
sit a decade apart instead of a sliver below 1), loops per output token, metrics against each
swept field, and ``loopserve capacity``'s SLO metrics against request rate. The step timeline
is ``loopserve.report.timeline``; the shared look is ``loopserve.report.style``.

Every report figure takes one or more ``RunData`` and shows each run's reference point (a
sweep figure: the slice through it); with several runs the series are ``run: arm``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from loopserve.outputs.rundata import RunData
from loopserve.report.style import (
    ARM_MARKERS,
    RUN_STYLES,
    arm_color,
    empty,
    plain_log,
    plt,
    png_bytes,
    slo_lines,
    tail_axes,
)
from loopserve.stats.metrics import metric

# (summary key, sub-key or None, axis label, higher is better)
SWEEP_METRICS = (
    ("itl_ms", "p99", "ITL p99 (ms)", False),
    ("ttft_ms", "p50", "TTFT p50 (ms)", False),
    ("output_tok_s", None, "output tok/s", True),
)
ExitSeries = tuple[str, str, list[int]]  # (label, arm, counts by loops 1..D)
_HATCHES = ("", "//", "..", "xx")
CAPACITY_LABELS = {"goodput_fraction": "goodput / throughput"}


def ttft_ms(requests: pd.DataFrame, arm: str, point_id: int) -> tuple[np.ndarray, np.ndarray]:
    """TTFT of every request with a first token, and a mask of the injected ones."""
    df = requests[(requests["arm"] == arm) & (requests["point_id"] == point_id)]
    df = df[df["first_token_s"].notna()]
    ttft = (df["first_token_s"] - df["arrival_s"]).to_numpy(dtype=float) * 1e3
    return ttft, df["injected"].astype(bool).to_numpy()


def ttft_figure(runs: Sequence[RunData]) -> Figure:
    """TTFT per arm: a box over every request, points for each, injected prompts marked; each
    run's own TTFT SLO."""
    multi = len(runs) > 1
    series = [(run, arm) for run in runs for arm in run.arms]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(series) + 2), 4.5))
    rng = np.random.default_rng(0)  # jitter only; fixed so the PNG is reproducible
    labels = []
    shown_injected = False
    for x, (run, arm) in enumerate(series):
        ttft, injected = ttft_ms(run.requests, arm, run.reference_point_id)
        labels.append(run.series_label(arm, multi))
        if not ttft.size:
            continue
        ax.boxplot([ttft], positions=[x], widths=0.5, showfliers=False,
                   medianprops={"color": arm_color(arm), "linewidth": 2})
        jitter = rng.uniform(-0.18, 0.18, ttft.size)
        ax.scatter(x + jitter[~injected], ttft[~injected], s=10, color=arm_color(arm),
                   alpha=0.45, label="requests" if x == 0 else None)
        if injected.any():
            ax.scatter(x + jitter[injected], ttft[injected], s=46, marker="D",
                       facecolor="white", edgecolor="black", linewidth=1.2, zorder=3,
                       label=None if shown_injected else "injected prompts")
            shown_injected = True
    ax.set_xticks(range(len(series)), labels, rotation=15 if multi else 0)
    plain_log(ax, "y")
    ax.set_ylabel("TTFT (ms, log scale)")
    for label, value, style in slo_lines(runs, "ttft_p99_ms", "TTFT p99"):
        ax.axhline(value, color="black", linestyle=style, linewidth=1, label=label)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("TTFT per arm (all repeats)")
    return fig


def itl_tail_figure(runs: Sequence[RunData]) -> Figure:
    """1 - CDF of ITL per arm at each run's reference point, log x and log y, each run's own
    ITL SLO as a dashed line. The gaps are the run folder's ``itl_quantiles`` (exact at p50,
    p90, p99, p99.9 and the max), or every gap of its token rows (``RunData.itl_tail``)."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    multi = len(runs) > 1
    lows, highs, floor = [], [], 1.0
    for i, run in enumerate(runs):
        for arm in run.arms:
            gaps, above = run.itl_tail(arm, run.reference_point_id)  # fraction of gaps >= x
            keep = gaps > 0
            gaps, above = gaps[keep], above[keep]
            if not gaps.size:
                continue
            p99, p999 = run.itl_percentiles(arm, run.reference_point_id, (99.0, 99.9))
            ax.step(gaps, above, where="post", color=arm_color(arm),
                    linestyle=RUN_STYLES[i % len(RUN_STYLES)], linewidth=1.6,
                    label=f"{run.series_label(arm, multi)}  (p99 {p99:.3g}, p99.9 {p999:.3g} ms)")
            lows.append(gaps[0])
            highs.append(gaps[-1])
            floor = min(floor, float(above[-1]))
    if not lows:
        empty(ax, "no per-token rows or ITL quantiles in this run")
        return fig
    slos = slo_lines(runs, "itl_p99_ms", "ITL p99")
    low, high = min(lows), max(highs + [v for _, v, _ in slos])
    for label, value, style in slos:
        ax.axvline(value, color="black", linestyle=style, linewidth=1, label=label)
    bottom = tail_axes(ax, low, high, floor)
    for p, name in ((0.1, "p90"), (0.01, "p99"), (0.001, "p99.9")):
        if p >= bottom:
            ax.axhline(p, color="#999999", linewidth=0.8, linestyle=":")
            ax.text(1.005, p, name, transform=ax.get_yaxis_transform(), fontsize=8,
                    va="center", color="#555555")
    ax.set_title("ITL tail per arm (1 - CDF, all repeats pooled)")
    return fig


def run_exit_counts(run: RunData) -> dict[str, list[int]]:
    """Per arm, decode tokens by loops (index 0 = 1 loop) at the reference point, from
    summary.json's ``exit_depth_counts``, else the per-token table; empty without either.
    The first output token of a request (always D loops, from the prompt) is left out."""
    ref = run.reference_point_id
    rows = run.summary.get("exit_depth_counts")
    if isinstance(rows, list):
        return {str(r["arm"]): [int(c) for c in r["counts"]] for r in rows
                if r.get("point_id") == ref}
    tokens = getattr(run, "tokens", None)
    if tokens is None or len(tokens) == 0 or "exit_depth" not in tokens:
        return {}
    depth = int(tokens["exit_depth"].max())
    dec = tokens[(tokens["point_id"] == ref) & (tokens["index"] > 0)]
    out: dict[str, list[int]] = {}
    for arm in run.arms:
        d = dec[dec["arm"] == arm]["exit_depth"].to_numpy(dtype=int)
        if d.size:
            out[arm] = np.bincount(d - 1, minlength=depth).tolist()
    return out


def exit_series(runs: Sequence[RunData]) -> list[ExitSeries]:
    """Every (run, arm) series with at least one decode token, in run then arm order."""
    multi = len(runs) > 1
    out: list[ExitSeries] = []
    for run in runs:
        counts = run_exit_counts(run)
        for arm in run.arms:
            c = counts.get(arm)
            if c and sum(c):
                out.append((run.series_label(arm, multi), arm, c))
    return out


def mean_loops(counts: Sequence[int]) -> float:
    """Mean loops per decode token."""
    return sum((d + 1) * n for d, n in enumerate(counts)) / sum(counts)


def exit_depth_figure(runs: Sequence[RunData]) -> Figure | None:
    """Grouped bars of the fraction of decode tokens that ran 1, 2, ..., D loops, with each
    series' mean; None without decode tokens or when every series ran all its tokens at one
    and the same depth (fixed exits: nothing to compare)."""
    series = exit_series(runs)
    used = {tuple(np.flatnonzero(c)) for _, _, c in series}
    if not series or (len(used) == 1 and len(next(iter(used))) == 1):
        return None
    depth = max(len(c) for _, _, c in series)
    fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained")
    width = 0.8 / len(series)
    x = np.arange(1, depth + 1)
    for i, (label, arm, counts) in enumerate(series):
        frac = np.zeros(depth)
        frac[:len(counts)] = np.asarray(counts, dtype=float) / sum(counts)
        ax.bar(x - 0.4 + (i + 0.5) * width, frac, width, color=arm_color(arm),
               hatch=_HATCHES[(i // 3) % len(_HATCHES)], edgecolor="white",
               label=f"{label} (mean {mean_loops(counts):.2f} loops, {sum(counts)} tokens)")
    ax.set_xticks(x)
    ax.set_xlabel("loops run (exit depth)")
    ax.set_ylabel("fraction of decode tokens")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, frameon=False)
    return fig


def sweep_figure(runs: Sequence[RunData], field: str) -> Figure:
    """ITL p99, TTFT p50 and output tok/s against one swept field, one line per arm, y axes
    from zero, each run's own ITL SLO on the ITL panel.

    The other swept fields stay at the reference point's values (a slice through it).
    """
    fig, axes = plt.subplots(1, len(SWEEP_METRICS), figsize=(13, 3.8))
    multi = len(runs) > 1
    categorical = False
    for i, run in enumerate(runs):
        ref = run.point_values(run.reference_point_id)
        pts = [p for p in run.points
               if field in p["values"]
               and all(v == ref.get(k) for k, v in p["values"].items() if k != field)]
        xs = [p["values"][field] for p in pts]
        categorical |= not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                               for x in xs)
        for j, arm in enumerate(run.arms):
            med = {m["point_id"]: m for m in run.summary["medians"] if m["arm"] == arm}
            for ax, (key, sub, _label, _) in zip(axes, SWEEP_METRICS, strict=True):
                ys = [_metric(med.get(p["point_id"]), key, sub) for p in pts]
                xplot = [str(x) for x in xs] if categorical else xs
                # later arms drawn smaller, so an arm hidden under another still shows
                ax.plot(xplot, ys, marker=ARM_MARKERS.get(arm, "o"), color=arm_color(arm),
                        markersize=9 - 2 * (j % 3), linewidth=2.2 - 0.5 * (j % 3),
                        linestyle=RUN_STYLES[i % len(RUN_STYLES)],
                        label=run.series_label(arm, multi))
                if not categorical:
                    ax.set_xticks(sorted(set(xs)))
    for ax, (key, _sub, label, higher) in zip(axes, SWEEP_METRICS, strict=True):
        ax.set_xlabel(field)
        ax.set_title(f"{label} ({'higher' if higher else 'lower'} is better)", fontsize=10)
        ax.grid(True, alpha=0.3)
        if key == "itl_ms":
            for slo_label, value, style in slo_lines(runs, "itl_p99_ms", "ITL p99"):
                ax.axhline(value, color="black", linestyle=style, linewidth=1, label=slo_label)
        ax.set_ylim(bottom=0)  # a difference of 10% should look like 10%
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def _metric(row: Mapping[str, object] | None, key: str, sub: str | None) -> float:
    value = metric(row, key, sub)
    return float("nan") if value is None else value


def capacity_png(arms: Sequence[Mapping[str, Any]], limits: Mapping[str, float],
                 goodput_fraction: float | None) -> bytes:
    """capacity.png: each SLO metric against request rate, one line per arm, the limit and
    each arm's capacity marked (probes that met the SLO filled, those that failed hollow),
    from capacity.json's ``arms`` entries (``probes`` with ``rate``, ``meets`` and a value
    per criterion column)."""
    columns = list(limits) + (["goodput_fraction"] if goodput_fraction is not None else [])
    fig, axes = plt.subplots(1, len(columns), figsize=(5.2 * len(columns), 3.8), squeeze=False)
    for ax, col in zip(axes[0], columns, strict=True):
        values: list[float] = []
        for entry in arms:
            arm = str(entry["arm"])
            pts = sorted((p["rate"], p[col], p["meets"]) for p in entry["probes"]
                         if p.get(col) is not None)
            if not pts:
                continue
            color, marker = arm_color(arm), ARM_MARKERS.get(arm, "o")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, lw=1.2, label=arm)
            for rate, value, ok in pts:
                ax.plot([rate], [value], marker=marker, ms=6, color=color,
                        markerfacecolor=color if ok else "white", ls="none")
            values += [p[1] for p in pts]
            if entry.get("capacity_req_s") is not None:
                ax.axvline(entry["capacity_req_s"], color=color, ls=":", lw=1)
        limit = limits[col] if goodput_fraction is None or col in limits else goodput_fraction
        ax.axhline(limit, color="black", ls="--", lw=1, label=f"SLO {limit:g}")
        positive = [v for v in values + [limit] if v > 0]
        if positive and max(positive) / min(positive) > 20:
            plain_log(ax, "y")  # above capacity latencies grow by orders of magnitude
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(CAPACITY_LABELS.get(col, col.replace("_ms", " (ms)").replace("_", " ")))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("SLO metrics against request rate (median over repeats; dotted: capacity; "
                 "hollow: SLO missed)", fontsize=9)
    return png_bytes(fig)
