"""The report's exit-depth figure: per arm (and run), the fraction of decode tokens that ran
1, 2, ..., D loops at the reference point, with each series' mean loops per token.

Read from summary.json's ``exit_depth_counts`` (``loopserve.stats.summary``); a run
folder written before that key existed falls back to the per-token table when it has one.
The first output token of a request (always D loops, from the prompt) is left out. No
figure when every series runs all its tokens at one and the same depth (fixed exits: there
is nothing to compare).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from loopserve.outputs.rundata import RunData
from loopserve.report.plots import arm_color

Series = tuple[str, str, list[int]]  # (label, arm, counts by loops 1..D)
_HATCHES = ("", "//", "..", "xx")


def run_exit_counts(run: RunData) -> dict[str, list[int]]:
    """Per arm, decode tokens by loops (index 0 = 1 loop) at the reference point; empty when
    the run has neither the summary key nor per-token rows."""
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


def exit_series(runs: Sequence[RunData]) -> list[Series]:
    """Every (run, arm) series with at least one decode token, in run then arm order."""
    multi = len(runs) > 1
    out: list[Series] = []
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


def _one_depth(series: Sequence[Series]) -> bool:
    """Whether every series ran all its tokens at one depth, the same for all."""
    used = {tuple(np.flatnonzero(c)) for _, _, c in series}
    return len(used) == 1 and len(next(iter(used))) == 1


def exit_depth_figure(runs: Sequence[RunData]) -> Figure | None:
    """Grouped bars of the loops-per-token distribution, or None (see the module doc)."""
    series = exit_series(runs)
    if not series or _one_depth(series):
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
