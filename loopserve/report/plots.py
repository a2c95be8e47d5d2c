"""Report figures (matplotlib, Agg): TTFT per arm, metrics against swept fields, and what they
share (colours, styles, each run's own SLO lines). The ITL tail lives in
``loopserve.report.itl``.

Every figure takes one or more ``RunData``; with several runs each series is labelled
``run: arm`` and runs differ by line style, arms by colour; each run's SLO is its own. The
step timeline lives in ``loopserve.report.timeline``.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from loopserve.outputs.rundata import RunData  # noqa: E402
from loopserve.stats.metrics import metric  # noqa: E402

ARM_COLORS = {"atomic": "#c0392b", "per_depth": "#e69f00", "mixed": "#0072b2"}
ARM_MARKERS = {"atomic": "s", "per_depth": "^", "mixed": "o"}
RUN_STYLES = ("-", "--", ":", "-.")
SLO_STYLES: tuple[Any, ...] = ("--", ":", "-.", (0, (6, 2, 1, 2)))
_PLAIN = FuncFormatter(lambda v, _pos: f"{v:g}")
# (summary key, sub-key or None, axis label, higher is better)
SWEEP_METRICS = (
    ("itl_ms", "p99", "ITL p99 (ms)", False),
    ("ttft_ms", "p50", "TTFT p50 (ms)", False),
    ("output_tok_s", None, "output tok/s", True),
)


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


def swept_fields(run: RunData) -> list[str]:
    """Fields that take more than one value across the run's points."""
    fields: list[str] = []
    for p in run.points:
        for key in p["values"]:
            if key not in fields:
                fields.append(key)
    return [f for f in fields if len({repr(p["values"].get(f)) for p in run.points}) > 1]


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
