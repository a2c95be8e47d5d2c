"""report.html of ``loopserve bench serve`` results: client-side TTFT and ITL, the look of the
simulated runs' report (its stylesheet, its log ticks, its ITL tail).

One page for one or more result files (a folder is every ``*.json`` in it that is a bench
result): a table of each result's counts, throughputs and latency statistics as the result
file gives them; with ``--save-detailed`` lists, the TTFT of every request over its send
time, TTFT per result (box and points) and the ITL tail (1 - CDF, log-log) of every gap.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from loopserve.bench.datasets import read_json_file
from loopserve.errors import UserError
from loopserve.report.page import render
from loopserve.report.sections import Table, num
from loopserve.report.style import (
    ARM_COLORS,
    empty,
    plain_log,
    plt,
    png_bytes,
    tail_axes,
)

COLORS = (*ARM_COLORS.values(), "#cc79a7", "#56b4e9", "#555555")
REQUIRED = ("completed", "failed", "duration")
COLUMNS = (("completed", "completed"), ("failed", "failed"), ("duration s", "duration"),
           ("req/s", "request_throughput"), ("out tok/s", "output_throughput"),
           ("TTFT p50", "median_ttft_ms"), ("TTFT p99", "p99_ttft_ms"),
           ("TPOT p50", "median_tpot_ms"), ("ITL p50", "median_itl_ms"),
           ("ITL p99", "p99_itl_ms"), ("E2EL p99", "p99_e2el_ms"))


@dataclass(frozen=True)
class BenchResult:
    """One result file: its label in the report and its keys."""

    path: Path
    label: str
    data: Mapping[str, Any]

    @property
    def ttfts_ms(self) -> np.ndarray:
        ok = [t for t, e in zip(self.data.get("ttfts") or [], self._errors(), strict=False)
              if not e]
        return np.asarray(ok, dtype=float) * 1e3

    @property
    def itls_ms(self) -> np.ndarray:
        gaps = [g for gs, e in zip(self.data.get("itls") or [], self._errors(), strict=False)
                if not e for g in gs]
        return np.sort(np.asarray(gaps, dtype=float) * 1e3)

    def _errors(self) -> list[str]:
        ttfts = self.data.get("ttfts") or []
        return list(self.data.get("errors") or [""] * len(ttfts))


def is_bench_result(path: Path) -> bool:
    """Whether ``path`` is a bench result file, or a folder of them (no ``summary.json``)."""
    if path.is_file():
        return path.suffix == ".json"
    return (path.is_dir() and not (path / "summary.json").exists()
            and any(path.glob("*.json")))


def _load(f: Path, label_stem: bool) -> BenchResult:
    try:
        data = read_json_file(f, "RUN_DIR")
    except ValueError as err:
        raise UserError("RUN_DIR", str(err).partition(": ")[2]) from None
    if not isinstance(data, dict) or any(k not in data for k in REQUIRED):
        raise UserError("RUN_DIR", f"{f} is not a bench serve result (no "
                        f"{'/'.join(REQUIRED)} keys)")
    label = str(data.get("label") or data.get("backend") or f.stem)
    return BenchResult(f, f"{label} ({f.stem})" if label_stem else label, data)


def load_results(path: Path) -> list[BenchResult]:
    """The result in a file, or every result among a folder's ``*.json`` (others, such as an
    e2e folder's ``e2e.json``, are named on stderr and left out); UserError naming a file
    that is not a result, or a folder with none."""
    if path.is_file():
        return [_load(path, False)]
    out, skipped = [], []
    files = sorted(path.glob("*.json"))
    for f in files:
        try:
            out.append(_load(f, len(files) > 1))
        except UserError:
            skipped.append(f.name)
    if not out:
        raise UserError("RUN_DIR", f"{path} holds no bench serve result (a *.json with "
                        f"{'/'.join(REQUIRED)} keys)")
    if skipped:
        print(f"report: left out {len(skipped)} file(s) that are no bench serve result: "
              f"{', '.join(skipped)[:150]}", file=sys.stderr)
    return out


def ttft_over_time_figure(results: Sequence[BenchResult]) -> Figure:
    """TTFT of each successful request against its send time."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    shown = False
    for i, r in enumerate(results):
        starts, ttfts = r.data.get("start_times"), r.data.get("ttfts")
        if not starts or not ttfts:
            continue
        ok = [not e for e in r._errors()]
        x = np.asarray(starts, dtype=float)[ok]
        y = np.asarray(ttfts, dtype=float)[ok] * 1e3
        ax.scatter(x, y, s=12, alpha=0.6, color=COLORS[i % len(COLORS)], label=r.label)
        shown = shown or bool(y.size)
    if not shown:
        empty(ax, "no start_times / ttfts: run bench serve with --save-detailed")
        return fig
    plain_log(ax, "y")
    ax.set_xlabel("send time (s from the benchmark's start)")
    ax.set_ylabel("TTFT (ms, log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("TTFT per request over the run")
    return fig


def ttft_box_figure(results: Sequence[BenchResult]) -> Figure:
    """TTFT per result: a box over every successful request, points for each."""
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(results) + 2), 4.5))
    rng = np.random.default_rng(0)  # jitter only; fixed so the PNG is reproducible
    drawn = False
    for x, r in enumerate(results):
        ttft = r.ttfts_ms
        if not ttft.size:
            continue
        color = COLORS[x % len(COLORS)]
        ax.boxplot([ttft], positions=[x], widths=0.5, showfliers=False,
                   medianprops={"color": color, "linewidth": 2})
        ax.scatter(x + rng.uniform(-0.18, 0.18, ttft.size), ttft, s=10, color=color,
                   alpha=0.45)
        drawn = True
    if not drawn:
        empty(ax, "no ttfts: run bench serve with --save-detailed")
        return fig
    ax.set_xticks(range(len(results)), [r.label for r in results])
    plain_log(ax, "y")
    ax.set_ylabel("TTFT (ms, log scale)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.set_title("TTFT per result (client side)")
    return fig


def itl_tail_figure(results: Sequence[BenchResult]) -> Figure:
    """1 - CDF of every token gap per result, log x and log y."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    lows, highs, floor = [], [], 1.0
    for i, r in enumerate(results):
        gaps = r.itls_ms
        gaps = gaps[gaps > 0]
        if not gaps.size:
            continue
        above = (gaps.size - np.arange(gaps.size)) / gaps.size
        p99, p999 = np.percentile(gaps, (99.0, 99.9))
        ax.step(gaps, above, where="post", color=COLORS[i % len(COLORS)], linewidth=1.6,
                label=f"{r.label}  (p99 {p99:.3g}, p99.9 {p999:.3g} ms)")
        lows.append(gaps[0])
        highs.append(gaps[-1])
        floor = min(floor, float(above[-1]))
    if not lows:
        empty(ax, "no itls: run bench serve with --save-detailed")
        return fig
    tail_axes(ax, min(lows), max(highs), floor)
    ax.set_title("ITL tail per result (1 - CDF, client side)")
    return fig


def figures(results: Sequence[BenchResult]) -> list[tuple[str, bytes]]:
    """(title, PNG) of every figure."""
    return [("TTFT per request over the run", png_bytes(ttft_over_time_figure(results))),
            ("TTFT per result", png_bytes(ttft_box_figure(results))),
            ("ITL tail per result (1 - CDF)", png_bytes(itl_tail_figure(results)))]


def _cell(value: Any) -> str:
    return num(float(value)) if isinstance(value, int | float) else "–"


def render_bench_html(results: Sequence[BenchResult]) -> str:
    """The whole page (``templates/bench.html.j2``); images embedded, nothing fetched."""
    table = Table(["result", *(c for c, _ in COLUMNS)],
                  [[r.label] + [_cell(r.data.get(key)) for _, key in COLUMNS] for r in results])
    return render("bench.html.j2", results=results, results_table=table,
                  figures=figures(results))
