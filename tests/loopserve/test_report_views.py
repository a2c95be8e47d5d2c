"""The report's headline (computed from a hand-made summary), each run's own SLO lines, sweep
axes from zero, the ITL tail's log axes and tick labels, the cost-model header and the
glossary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes

from loopserve.cli import main
from loopserve.outputs.rundata import RunData
from loopserve.report.compare import point_headline
from loopserve.report.figures import itl_tail_figure, sweep_figure
from loopserve.report.page import cost_model_text
from loopserve.report.sections import spread_of
from loopserve.report.style import log_ticks, slo_lines
from tests.scenario_fixtures import tiny, write_scenario

EMPTY = pd.DataFrame()


def row(arm: str, itl_p99: float, tok_s: float, ttft_p99: float, point_id: int = 0,
        repeat: int | None = None, valid: bool = True) -> dict[str, Any]:
    out = {"arm": arm, "point_id": point_id, "valid": valid,
           "itl_ms": {"p99": itl_p99}, "ttft_ms": {"p99": ttft_p99}, "output_tok_s": tok_s}
    return out if repeat is None else dict(out, repeat=repeat)


def fake(medians: list[dict[str, Any]], runs: list[dict[str, Any]] | None = None,
         scenario: dict[str, Any] | None = None, points: list[dict[str, Any]] | None = None,
         label: str = "x", tokens: pd.DataFrame = EMPTY) -> RunData:
    summary = {"points": points or [{"point_id": 0, "values": {}}], "runs": runs or [],
               "medians": medians}
    scn = scenario or {"arms": ["atomic", "per_depth", "mixed"]}
    return RunData(Path(label), summary, scn, {}, EMPTY, EMPTY, tokens, label=label)  # type: ignore[arg-type]


def test_headline_from_a_hand_made_summary() -> None:
    # mixed/atomic: ITL p99 3.7/13.7 = -73%, tok/s 2442/2200 = 1.11x, TTFT p99 49/50 = -2%
    medians = [row("atomic", 13.7, 2200.0, 50.0), row("per_depth", 6.0, 2300.0, 90.0),
               row("mixed", 3.7, 2442.0, 49.0)]
    run = fake(medians)
    assert point_headline(run, 0) == (
        "mixed cuts ITL p99 by 73% against atomic at 1.11x output tok/s; TTFT p99 -2%")
    # paired repeats that differ give ranges: repeat 0 -70%/1.10x/-4%, repeat 1 -75%/1.12x/+2%
    runs = [row("atomic", 10.0, 1000.0, 50.0, repeat=0), row("mixed", 3.0, 1100.0, 48.0, repeat=0),
            row("atomic", 12.0, 1000.0, 50.0, repeat=1), row("mixed", 3.0, 1120.0, 51.0, repeat=1)]
    assert point_headline(fake(medians, runs), 0) == (
        "mixed cuts ITL p99 by 73% (70-75%) against atomic at 1.11x (1.10-1.12x) output "
        "tok/s; TTFT p99 -2% (-4 to +2%)")
    # worse, and an invalid median, are said so
    worse = [row("atomic", 4.0, 1000.0, 50.0), row("mixed", 5.0, 990.0, 60.0, valid=False)]
    assert point_headline(fake(worse), 0) == (
        "mixed raises ITL p99 by 25% against atomic at 0.99x output tok/s; TTFT p99 +20% "
        "(mixed: INVALID runs at this point)")
    same = [row("atomic", 4.0, 1000.0, 50.0), row("mixed", 4.01, 1000.0, 50.0)]
    assert point_headline(fake(same), 0).startswith(  # type: ignore[union-attr]
        "mixed matches atomic's ITL p99 (within 0.5%)")
    # without mixed the pair is per_depth against atomic; one arm alone has no headline
    no_mixed = fake(medians[:2], scenario={"arms": ["atomic", "per_depth"]})
    assert point_headline(no_mixed, 0).startswith("per_depth cuts ITL p99 by 56%")  # type: ignore[union-attr]
    assert point_headline(fake(medians[:1], scenario={"arms": ["atomic"]}), 0) is None


def test_median_spreads_prefer_the_interval_and_hide_when_repeats_agree() -> None:
    m: Any = {"spread": {"itl_ms": {"p99": {"min": 1.0, "max": 3.0, "ci95_low": 1.5,
                                            "ci95_high": 2.5},
                                    "p50": {"min": 2.0, "max": 2.0, "ci95_low": None,
                                            "ci95_high": None}},
                         "output_tok_s": {"min": 10, "max": 12, "ci95_low": None,
                                          "ci95_high": None}}}
    assert spread_of(m, "itl_ms", "p99") == (1.5, 2.5)
    assert spread_of(m, "output_tok_s", None) == (10.0, 12.0)
    assert spread_of(m, "itl_ms", "p50") is None and spread_of({}, "itl_ms", "p99") is None  # type: ignore[arg-type]


def _sweep_runs(slo_b: float) -> list[RunData]:
    points = [{"point_id": i, "values": {"workload.decode_population": v}}
              for i, v in enumerate((4, 8))]
    medians = [dict(row(a, 2100.0 + 50 * i + 10 * j, 2400.0 + i, 10.0, point_id=i),
                    ttft_ms={"p50": 5.0, "p99": 9.0})
               for i in range(2) for j, a in enumerate(("atomic", "mixed"))]
    scn = {"arms": ["atomic", "mixed"], "workload": {"decode_population": 4}}
    return [fake(medians, scenario=dict(scn, slo={"itl_p99_ms": 3000.0}), points=points,
                 label="a"),
            fake(medians, scenario=dict(scn, slo={"itl_p99_ms": slo_b}), points=points,
                 label="b")]


def _hlines(ax: Axes) -> list[float]:
    return sorted(float(ln.get_ydata()[0]) for ln in ax.get_lines()  # type: ignore[index]
                  if len(set(ln.get_ydata())) == 1 and len(ln.get_ydata()) == 2)  # type: ignore[arg-type]


def test_each_run_draws_its_own_slo_and_sweep_axes_start_at_zero() -> None:
    runs = _sweep_runs(2500.0)
    assert slo_lines(runs, "itl_p99_ms", "ITL p99") == [
        ("a: SLO ITL p99 3000 ms", 3000.0, "--"), ("b: SLO ITL p99 2500 ms", 2500.0, ":")]
    fig = sweep_figure(runs, "workload.decode_population")
    assert _hlines(fig.axes[0]) == [2500.0, 3000.0]
    for ax in fig.axes:  # 2,100-2,450 must not fill the panel
        assert ax.get_ylim()[0] == 0.0, ax.get_title()
    same = _sweep_runs(3000.0)
    assert slo_lines(same, "itl_p99_ms", "ITL p99") == [("SLO ITL p99 3000 ms", 3000.0, "--")]
    assert _hlines(sweep_figure(same, "workload.decode_population").axes[0]) == [3000.0]


def test_log_ticks_sit_where_the_data_is() -> None:
    assert log_ticks(2.9, 3.7) == [3.0, 3.5]  # only the densest set reaches into 2.9-3.7
    assert log_ticks(2.5, 17.0) == [3.0, 4.0, 5.0, 7.0, 10.0, 15.0]
    assert log_ticks(0.8, 120.0) == [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]


def test_itl_tail_is_one_minus_cdf_on_log_axes() -> None:
    rng = np.random.default_rng(0)
    gaps = np.concatenate([rng.uniform(2.9e-3, 3.7e-3, 990), np.full(10, 13.8e-3)])
    times = np.concatenate([[0.0], np.cumsum(gaps)])
    tokens = pd.DataFrame({"arm": "atomic", "point_id": 0, "repeat": 0, "request_id": "r",
                           "index": np.arange(times.size), "time_s": times})
    run = fake([], scenario={"arms": ["atomic"], "slo": {"itl_p99_ms": 10}}, tokens=tokens)
    ax = itl_tail_figure([run]).axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert {"3", "4", "10"} <= set(labels), labels
    fig = ax.figure
    fig.canvas.draw()  # type: ignore[union-attr]
    ylabels = {t.get_text() for t in ax.get_yticklabels()}
    assert {"1", "0.1", "0.01", "0.001"} <= ylabels and all(len(t) <= 8 for t in ylabels)
    line = ax.get_lines()[0]
    y = np.asarray(line.get_ydata())
    assert y[0] == 1.0 and y[-1] == pytest.approx(1 / 1000)  # the tail reaches 1/n
    assert ax.get_ylim()[0] <= 1e-3
    empty = itl_tail_figure([fake([], scenario={"arms": ["atomic"]})])
    assert "no per-token rows" in empty.axes[0].texts[0].get_text()


def test_cost_model_header_text() -> None:
    assert cost_model_text({}) == "unknown"
    assert cost_model_text({"cost_model": {"kind": "roofline", "profile": None,
                                           "profile_sha256": None, "hardware": "h200"}}) == (
        "roofline, hardware h200")
    assert cost_model_text({"cost_model": {
        "kind": "calibrated", "requested": "auto",
        "profile": "results/profiles/h200-ouro-1.4b.json",
        "profile_sha256": "0123456789abcdef", "hardware": "h200"}}) == (
        "calibrated (requested auto), profile results/profiles/h200-ouro-1.4b.json (sha256 "
        "0123456789ab), hardware h200")


def test_the_run_report_has_headline_glossary_and_cost_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_scenario(tmp_path, tiny(repeats=1, slo={"itl_p99_ms": 50}))
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    html = (tmp_path / "r" / "report.html").read_text()
    assert "<h2>Headline</h2>" in html and "mixed " in html and " against atomic at " in html
    assert "<h2>Glossary</h2>" in html
    for term in ("core call", "token-loops", "prelude / coda", "depth", "TTFT", "ITL", "TPOT",
                 "goodput"):
        assert f"<dt><b>{term}" in html, term
    # the cost model that resolved, from summary.json (hardening's record), not "unknown"
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert f"cost model: <b>{cost_model_text(summary)}</b>" in html
    assert summary["cost_model"]["kind"] in html and "unknown" not in cost_model_text(summary)
    assert "<h2>ITL tail (ms)</h2>" in html and "<th class=\"\">p99.9</th>" in html
