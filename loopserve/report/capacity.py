"""capacity.png: each SLO metric against request rate, one line per arm, with the limit and
each arm's capacity marked (probes that met the SLO filled, those that failed hollow)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from loopserve.report.plots import ARM_MARKERS, arm_color, plain_log, png_bytes  # noqa: E402

LABELS = {"goodput_fraction": "goodput / throughput"}


def capacity_png(arms: Sequence[Mapping[str, Any]], limits: Mapping[str, float],
                 goodput_fraction: float | None) -> bytes:
    """The figure of capacity.json's ``arms`` entries (``probes`` with ``rate``, ``meets``
    and a value per criterion column)."""
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
        ax.set_ylabel(LABELS.get(col, col.replace("_ms", " (ms)").replace("_", " ")))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("SLO metrics against request rate (median over repeats; dotted: capacity; "
                 "hollow: SLO missed)", fontsize=9)
    return png_bytes(fig)
