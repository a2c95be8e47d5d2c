"""Exit depths in summary.json (``exit_depth_counts``) and the report's loops-per-token
figure: counts equal the per-token table's, the figure appears for adaptive exits and not
for fixed ones, and a run folder without the summary key falls back to its tokens."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from loopserve.cli import main
from loopserve.outputs.rundata import load_run
from loopserve.report.figures import exit_depth_figure, mean_loops, run_exit_counts
from tests.scenario_fixtures import tiny, write_scenario

ADAPTIVE = {"mode": "ouro", "exit_threshold": 0.5}


@pytest.fixture(scope="module")
def adaptive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("exits")
    out = folder / "run"
    path = write_scenario(folder, tiny(repeats=2, exit=ADAPTIVE))
    assert main(["run", str(path), "--out", str(out), "--no-progress",
                 "--set", "outputs.tokens=true"]) == 0
    return out


def test_counts_are_the_decode_tokens_by_loops(adaptive: Path) -> None:
    summary = json.loads((adaptive / "summary.json").read_text())
    tokens = load_run(adaptive).tokens
    rows = summary["exit_depth_counts"]
    assert [(r["point_id"], r["arm"]) for r in rows] == [
        (0, arm) for arm in ("atomic", "per_depth", "mixed")]
    for r in rows:
        dec = tokens[(tokens["arm"] == r["arm"]) & (tokens["index"] > 0)]
        assert r["counts"] == np.bincount(dec["exit_depth"] - 1, minlength=4).tolist()
        assert len(r["counts"]) == 4 and sum(r["counts"]) == len(dec) > 0
    assert any(np.count_nonzero(r["counts"]) > 1 for r in rows)  # adaptive: several depths


def test_the_report_shows_the_exit_depth_figure(adaptive: Path) -> None:
    html = (adaptive / "report.html").read_text()
    assert "Loops per output token per arm" in html
    assert (adaptive / "exit_depths.png").is_file()


def test_without_the_summary_key_the_tokens_give_the_same_counts(adaptive: Path) -> None:
    run = load_run(adaptive)
    from_summary = run_exit_counts(run)
    del run.summary["exit_depth_counts"]
    assert run_exit_counts(run) == from_summary
    run.tokens = pd.DataFrame()  # neither: nothing to plot, no error
    assert run_exit_counts(run) == {} and exit_depth_figure([run]) is None


def test_fixed_exits_have_no_figure(tmp_path: Path) -> None:
    out = tmp_path / "run"
    path = write_scenario(tmp_path, tiny(repeats=1))
    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    run = load_run(out)
    assert {tuple(np.flatnonzero(c)) for c in run_exit_counts(run).values()} == {(3,)}
    assert exit_depth_figure([run]) is None
    assert "Loops per output token" not in (out / "report.html").read_text()


def test_mean_loops() -> None:
    assert mean_loops([1, 0, 3, 0]) == pytest.approx((1 + 9) / 4)
