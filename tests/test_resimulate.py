"""tools.resimulate: the profile as it is reproduces the fidelity run's own simulation (at
both speeds), and dropping a part changes what that part prices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_fidelity import files, profile, result  # noqa: F401  (fixtures)
from tools.resimulate import resimulate, table


def test_as_is_reproduces_the_fidelity_runs_simulation(result: Path) -> None:  # noqa: F811
    doc = json.loads((result / "fidelity.json").read_text())
    out = resimulate(result, ["step_gap"])
    for speed, section in (("profile", doc["arms"]), ("run", doc["at_run_speed"]["arms"])):
        got = out["variants"][f"as is @ {speed} speed"]
        for arm, row in got.items():
            for metric in ("itl_p50_ms", "ttft_p50_ms"):
                assert row[metric]["sim"] == pytest.approx(section[arm][metric]["sim"], rel=1e-12)
                assert row[metric]["measured"] == section[arm][metric]["measured"]
    # without the host gap every step is shorter, so every arm's TTFT p50 drops
    without = out["variants"]["without step_gap @ profile speed"]
    for arm, row in without.items():
        assert row["ttft_p50_ms"]["sim"] < out["variants"]["as is @ profile speed"][arm][
            "ttft_p50_ms"]["sim"]
    assert "without step_gap @ run speed" in table(out)
