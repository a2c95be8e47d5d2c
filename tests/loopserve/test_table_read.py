"""``loopserve.outputs.tables.read_table`` with ``where``: Parquet read one row group at a
time (groups whose statistics rule a value out skipped) gives the frame CSV gives and the
frame of the whole table filtered in pandas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from loopserve.outputs import tables
from loopserve.outputs.rundata import RunData
from loopserve.outputs.tables import Codes, read_table, write_table

SCHEMA = (("arm", "text"), ("point_id", "int"), ("repeat", "int"), ("start_s", "float"),
          ("kind", "text"))


def _part(arm: str, point_id: int, repeat: int, n: int) -> dict[str, np.ndarray | Codes]:
    return {"arm": Codes.constant(arm, n), "point_id": np.full(n, point_id, np.int64),
            "repeat": np.full(n, repeat, np.int64), "start_s": np.arange(n) * 0.25 + repeat,
            "kind": Codes(np.arange(n, dtype=np.int32) % 2, ["decode", "prompt"])}


@pytest.fixture
def written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 7)  # several row groups per run
    parts = [_part(arm, p, r, 11 + 3 * r) for p in (0, 1) for arm in ("atomic", "mixed")
             for r in (0, 1, 2)]
    return {fmt: write_table(tmp_path, "steps", fmt, SCHEMA, parts)
            for fmt in tables.FORMATS}


@pytest.mark.parametrize("where", [
    {"arm": "mixed"}, {"arm": "mixed", "point_id": 1}, {"point_id": 0, "repeat": 2},
    {"arm": "atomic", "point_id": 1, "repeat": 1}, {"point_id": 5}, {"arm": "none"},
])
@pytest.mark.parametrize("columns", [None, ["repeat"], ["kind", "start_s"]])
def test_filtered_reads_agree(written: dict[str, Path], where: dict[str, object],
                              columns: list[str] | None) -> None:
    parquet = read_table(written["parquet"], columns, where)
    csv = read_table(written["csv"], columns, where)
    whole = read_table(written["parquet"])
    for name, value in where.items():
        whole = whole[whole[name] == value]
    whole = whole.reset_index(drop=True)[columns if columns is not None else whole.columns]
    if parquet.empty:
        assert not len(csv) and not len(whole) and list(parquet.columns) == list(whole.columns)
        return
    pd.testing.assert_frame_equal(parquet, whole)
    pd.testing.assert_frame_equal(parquet, csv)
    assert len(parquet) > 0 and len(parquet) == len(whole)


def test_first_repeats_equal_first_repeat_per_arm(tmp_path: Path) -> None:
    # atomic's lowest repeat at point 1 is 1, mixed's 0; "none" has no rows
    parts = [_part(arm, p, r, 5 + r) for p in (0, 1) for arm in ("mixed", "atomic")
             for r in (0, 1, 2) if not (arm == "atomic" and p == 1 and r == 0)]
    write_table(tmp_path, "steps", "parquet", SCHEMA, parts)
    run = RunData(tmp_path, {}, {}, {})  # type: ignore[typeddict-item]
    arms = ["atomic", "mixed", "none"]
    for point_id, columns in ((0, ()), (1, ()), (1, ("kind", "start_s"))):
        got = run.first_repeats("steps", arms, point_id, columns)
        assert list(got) == arms
        for arm in arms:
            want = run.first_repeat("steps", arm, point_id, columns)
            pd.testing.assert_frame_equal(got[arm], want, check_index_type=True)
        assert set(got["mixed"]["repeat"]) == {0} and got["none"].empty
        assert set(got["atomic"]["repeat"]) == {point_id}
