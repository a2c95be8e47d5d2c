"""The figures' shared look (matplotlib, Agg): arm colours and markers, run line styles, each
run's own SLO lines, log axes labelled with plain numbers, and PNG rendering.

With several runs each series is labelled ``run: arm``; runs differ by line style, arms by
colour. Log tick labels are plain numbers chosen inside the range the data covers
(``log_ticks``), so an arm whose gaps sit between 2.9 and 3.7 ms gets labels there, not only
at 5 and 10 ms.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    FixedLocator,
    FuncFormatter,
    NullFormatter,
    NullLocator,
)

from loopserve.outputs.rundata import RunData  # noqa: E402

__all__ = ["plt"]

ARM_COLORS = {"atomic": "#c0392b", "per_depth": "#e69f00", "mixed": "#0072b2",
              "wavefront": "#009e73"}
ARM_MARKERS = {"atomic": "s", "per_depth": "^", "mixed": "o", "wavefront": "D"}
RUN_STYLES = ("-", "--", ":", "-.")
SLO_STYLES: tuple[Any, ...] = ("--", ":", "-.", (0, (6, 2, 1, 2)))
_PLAIN = FuncFormatter(lambda v, _pos: f"{v:g}")
# mantissas per decade, sparse to dense: the first giving at least MIN_TICKS labels is used
MANTISSAS = ((1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0),
             (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0))
MIN_TICKS = 5


def png_bytes(fig: Figure) -> bytes:
    """Render and close a figure."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def arm_color(arm: str) -> str:
    return ARM_COLORS.get(arm, "#555555")


def slo_lines(runs: Sequence[RunData], key: str, name: str) -> list[tuple[str, float, Any]]:
    """(label, value, line style) of each run's own SLO ``key`` (e.g. ``itl_p99_ms``): one
    line when every run has the same value, else one per run that has it, named by run."""
    values = [(i, run, (run.scenario.get("slo") or {}).get(key)) for i, run in enumerate(runs)]
    have = [(i, run, float(v)) for i, run, v in values if v]
    if not have:
        return []
    if len(have) == len(runs) and len({v for _, _, v in have}) == 1:
        return [(f"SLO {name} {have[0][2]:g} ms", have[0][2], SLO_STYLES[0])]
    return [(f"{run.label}: SLO {name} {v:g} ms", v, SLO_STYLES[i % len(SLO_STYLES)])
            for i, run, v in have]


def plain_log(ax: Axes, axis: str) -> None:
    """Log scale with tick labels as plain numbers (20, 50, 100) instead of 2x10^1."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target.set_major_formatter(_PLAIN)
    target.set_minor_formatter(FuncFormatter(
        lambda v, _pos: f"{v:g}" if f"{v:g}"[0] in "25" else ""))


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


def fix_log_x(ax: Axes, low: float, high: float) -> None:
    """A log x axis over [low, high] with a margin, labelled at ``log_ticks``."""
    ax.set_xscale("log")
    ax.set_xlim(low / 1.15, high * 1.15)
    ax.xaxis.set_major_locator(FixedLocator(log_ticks(low / 1.15, high * 1.15)))
    ax.xaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def tail_axes(ax: Axes, low: float, high: float, floor: float) -> float:
    """The axes of a 1 - CDF plot of gaps in [low, high]: log x, log y from the decade below
    ``floor`` to just above 1, labels and legend; returns the y axis's bottom."""
    fix_log_x(ax, low, high)
    ax.set_yscale("log")
    bottom = 10.0 ** math.floor(math.log10(floor * 0.8))
    ax.set_ylim(bottom, 1.3)
    ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.set_xlabel("inter-token latency x (ms, log scale)")
    ax.set_ylabel("fraction of gaps ≥ x (log scale)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    return bottom


def empty(ax: Axes, text: str) -> None:
    """An axis with nothing to draw: ``text`` in its middle, no frame."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
