"""The ITL tail: the fraction of token gaps longer than x (1 - CDF) on log-log axes, so p99 and
p99.9 sit a decade apart instead of a sliver below 1, and ITL percentiles up to p99.9.

Tick labels are plain numbers chosen inside the range the data covers (``log_ticks``), so an
arm whose gaps sit between 2.9 and 3.7 ms gets labels there, not only at 5 and 10 ms. The gaps
come from the run folder's ``itl_quantiles`` (exact at p50, p90, p99, p99.9 and the max), or
every gap of the token rows in a folder without it (``RunData.itl_tail``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from loopserve.outputs.rundata import RunData
from loopserve.report.markup import esc, num, table
from loopserve.report.plots import RUN_STYLES, arm_color, plt, slo_lines

TAIL_PERCENTILES = (50.0, 90.0, 99.0, 99.9)
# mantissas per decade, sparse to dense: the first giving at least MIN_TICKS labels is used
MANTISSAS = ((1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0),
             (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0))
MIN_TICKS = 5


def log_ticks(low: float, high: float) -> list[float]:
    """Plain tick values m x 10^k in [low, high] (both > 0): the sparsest set of mantissas
    that gives at least ``MIN_TICKS`` ticks, else the densest."""
    if not (low > 0 and high >= low):
        return []
    ticks: list[float] = []
    for mantissas in MANTISSAS:
        ticks = []
        for k in range(math.floor(math.log10(low)), math.floor(math.log10(high)) + 1):
            ticks += [float(f"{m * 10.0 ** k:.6g}") for m in mantissas]
        ticks = [t for t in ticks if low <= t <= high]
        if len(ticks) >= MIN_TICKS:
            break
    return ticks


def plain_number(v: float, _pos: object = None) -> str:
    """0.001 and 15 rather than 1e-03 and 1.5x10^1."""
    return str(np.format_float_positional(float(f"{v:.6g}"), trim="-"))


def itl_percentiles(run: RunData, arm: str) -> list[float] | None:
    """ITL p50, p90, p99, p99.9 and max (ms) at the run's reference point, or None."""
    pct = run.itl_percentiles(arm, run.reference_point_id, (*TAIL_PERCENTILES, 100.0))
    return None if math.isnan(pct[0]) else pct


def fix_log_x(ax: Axes, low: float, high: float) -> None:
    ax.set_xscale("log")
    ax.set_xlim(low / 1.15, high * 1.15)
    ax.xaxis.set_major_locator(FixedLocator(log_ticks(low / 1.15, high * 1.15)))
    ax.xaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def itl_tail_figure(runs: Sequence[RunData]) -> Figure:
    """1 - CDF of ITL per arm at each run's reference point, log x and log y, each run's own
    ITL SLO as a dashed line."""
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
        ax.text(0.5, 0.5, "no per-token rows or ITL quantiles in this run",
                ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    slos = slo_lines(runs, "itl_p99_ms", "ITL p99")
    low, high = min(lows), max(highs + [v for _, v, _ in slos])
    for label, value, style in slos:
        ax.axvline(value, color="black", linestyle=style, linewidth=1, label=label)
    fix_log_x(ax, low, high)
    ax.set_yscale("log")
    bottom = 10.0 ** math.floor(math.log10(floor * 0.8))
    ax.set_ylim(bottom, 1.3)
    ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
    for p, name in ((0.1, "p90"), (0.01, "p99"), (0.001, "p99.9")):
        if p >= bottom:
            ax.axhline(p, color="#999999", linewidth=0.8, linestyle=":")
            ax.text(1.005, p, name, transform=ax.get_yaxis_transform(), fontsize=8,
                    va="center", color="#555555")
    ax.set_xlabel("inter-token latency x (ms, log scale)")
    ax.set_ylabel("fraction of gaps ≥ x (log scale)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title("ITL tail per arm (1 - CDF, all repeats pooled)")
    return fig


def itl_tail_section(runs: Sequence[RunData]) -> str:
    """ITL p50 to p99.9 and max per arm at each run's reference point ("" without tokens)."""
    multi = len(runs) > 1
    rows = []
    for run in runs:
        for arm in run.arms:
            pct = itl_percentiles(run, arm)
            if pct is not None:
                rows.append(([esc(run.label)] if multi else []) + [esc(arm)]
                            + [num(v) for v in pct])
    if not rows:
        return ""
    head = (["run"] if multi else []) + ["arm"] + [f"p{p:g}" for p in TAIL_PERCENTILES] + [
        "max"]
    return ("<h2>ITL tail (ms)</h2><p class='note'>Every token gap at the reference point, "
            "all repeats pooled (numpy's linear interpolation; from the run's itl_quantiles "
            "table, exact at these percentiles).</p>"
            + table(head, rows, left=2 if multi else 1))
