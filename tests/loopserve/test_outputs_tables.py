"""The record tables: Parquet (default) and CSV read back by ``load_run`` into equal frames,
Parquet reruns byte-identical, per-token rows only when asked for in simulation and always
on a real target, ``--format`` and ``outputs.format`` checked, and a run without token rows
still reporting its ITL distribution."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from loopserve.cli import main
from loopserve.outputs.records import ITL_QUANTILES
from loopserve.outputs.rundata import load_run
from tests.scenario_fixtures import tiny, write_scenario

TABLES = ("steps", "requests", "tokens", "itl_quantiles")


def _run(tmp_path: Path, name: str, *extra: str, data: dict | None = None) -> Path:
    path = write_scenario(tmp_path, data or tiny(), name=f"{name}.yaml")
    out = tmp_path / name
    assert main(["run", str(path), "--out", str(out), "--no-progress", *extra]) == 0
    return out


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("tables")
    tokens = ("--set", "outputs.tokens=true")
    return _run(tmp, "pq", *tokens), _run(tmp, "csv", "--format", "csv", *tokens)


def test_parquet_and_csv_load_to_equal_frames(both: tuple[Path, Path]) -> None:
    pq_dir, csv_dir = both
    assert {f"{t}.parquet" for t in TABLES} <= {p.name for p in pq_dir.iterdir()}
    assert {f"{t}.csv" for t in TABLES} <= {p.name for p in csv_dir.iterdir()}
    assert not list(pq_dir.glob("*.csv")) and not list(csv_dir.glob("*.parquet"))
    a, b = load_run(pq_dir), load_run(csv_dir)
    for name in TABLES:
        assert len(a.table(name)) > 0, name
        pd.testing.assert_frame_equal(a.table(name), b.table(name))
    steps = a.steps
    assert steps["depths"].isna().any() and steps["mixed"].dtype == bool
    assert a.requests["first_token_s"].dtype == np.float64


def test_parquet_reruns_are_byte_identical(both: tuple[Path, Path], tmp_path: Path) -> None:
    again = _run(tmp_path, "again", "--set", "outputs.tokens=true")
    for name in TABLES:
        assert (again / f"{name}.parquet").read_bytes() == \
            (both[0] / f"{name}.parquet").read_bytes(), name


def test_sim_writes_no_token_rows_by_default_and_keeps_the_itl_distribution(
    both: tuple[Path, Path], tmp_path: Path
) -> None:
    out = _run(tmp_path, "default")
    assert not list(out.glob("tokens.*"))
    run, full = load_run(out), load_run(both[0])
    assert not run.has_tokens and run.tokens.empty and full.has_tokens
    for arm in run.arms:
        q, ms = run.itl_distribution(arm, 0)
        assert q.tolist() == list(ITL_QUANTILES) and (np.diff(ms) >= 0).all()
        # exact at the table's quantiles: the same percentiles as from every token row
        assert run.itl_percentiles(arm, 0, (50, 90, 99)) == pytest.approx(
            full.itl_percentiles(arm, 0, (50, 90, 99)), rel=1e-12)
    assert (out / "report.html").is_file()


def test_cpu_target_always_writes_token_rows(tmp_path: Path) -> None:
    workload = dict(tiny()["workload"], decode_output_tokens=4,
                    inject=[{"at_decode_tokens": 2, "prompt_tokens": 8, "output_tokens": 2}])
    data = tiny(arms=["A2"], repeats=1, workload=workload,
                runner={"warmup": False, "dtype": "float32"})
    out = _run(tmp_path, "cpu", "--target", "cpu", data=data)
    tokens = load_run(out).tokens
    assert len(tokens) == 2 * 4 + 2 and (out / "tokens.parquet").is_file()


@pytest.mark.parametrize(("args", "start"), [
    (["--format", "xml"], "loopserve: error: --format: 'xml': use parquet or csv"),
    (["--set", "outputs.format=xml"], "loopserve: error: outputs.format: "),
    (["--set", "sweep={outputs.tokens: [true, false]}"],
     "loopserve: error: sweep.outputs.tokens: cannot be swept"),
])
def test_bad_format_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], start: str
) -> None:
    path = write_scenario(tmp_path, tiny())
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--no-progress", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(start) and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()
