"""tools.fidelity_pairs: the fixed twin really runs fixed exits, the adaptive run the
scenario's own, and the summary's medians and differences are the per-round ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.loopserve.test_fidelity import SCENARIO, profile
from tools import fidelity_pairs


def test_the_fixed_twin_runs_every_loop_and_the_adaptive_run_exits_early(tmp_path: Path) -> None:
    scn = {**SCENARIO, "name": "pairs-tiny",
           "exit": {"mode": "ouro", "exit_threshold": 0.5}}
    (tmp_path / "scn.yaml").write_text(yaml.safe_dump(scn))
    (tmp_path / "cpu-tiny.json").write_text(json.dumps(profile()))
    out = tmp_path / "pairs"
    doc = fidelity_pairs.run_pairs([str(tmp_path / "scn.yaml")], str(tmp_path / "cpu-tiny.json"),
                                   "cpu", rounds=1, repeats=1, out=out)
    exits = {kind: json.loads((out / f"0-scn-{kind}" / "fidelity.json").read_text())["exits"]
             for kind in fidelity_pairs.KINDS}
    for kind, section in exits.items():
        for arm in SCENARIO["arms"]:
            measured = section["arms"][arm]["measured"]["depth_fractions"]
            if kind == "fixed":
                assert measured[-1] == 1.0, (kind, arm, measured)
            else:
                assert measured[-1] < 1.0, (kind, arm, measured)
    row = doc["median"][str(tmp_path / "scn.yaml")]["atomic"]["itl_p50_ms"]
    assert row["adaptive_minus_fixed"] == pytest.approx(row["adaptive"] - row["fixed"])


def test_medians_are_taken_over_rounds_of_each_difference(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    errors = iter([0.10, 0.30, 0.06, 0.05, 0.20, 0.10])  # in the order the runs are made
    order: list[bool] = []

    def fake(scenario: str, profile: str, target: str, repeats: int, out: Path,
             fixed: bool) -> dict[str, Any]:
        e = next(errors)
        order.append(fixed)
        return {"arms": {"atomic": {m: {"rel_error": e} for m in fidelity_pairs.METRICS}},
                "at_run_speed": {"arms": {"atomic": {m: {"rel_error": e / 2}
                                                     for m in fidelity_pairs.METRICS}}},
                "step_errors": {"by_kind": {"decode": {"measured_s": 1 + e, "predicted_s": 1.0}}},
                "machine": {"slowdown_vs_calibration": None}}

    monkeypatch.setattr(fidelity_pairs, "_fidelity", fake)
    doc = fidelity_pairs.run_pairs(["s.yaml"], "p.json", "cpu", rounds=3, repeats=1,
                                   out=tmp_path)
    assert order == [True, False, False, True, True, False]  # round 1 runs adaptive first
    row = doc["median"]["s.yaml"]["atomic"]["ttft_p50_ms"]
    assert row["fixed"] == pytest.approx(0.10)        # median of 0.10, 0.05, 0.20
    assert row["adaptive"] == pytest.approx(0.10)     # median of 0.30, 0.06, 0.10
    assert row["adaptive_minus_fixed"] == pytest.approx(0.01)  # of +0.20, +0.01, -0.10
    assert row["fixed_at_run_speed"] == pytest.approx(0.05)
    assert "| s | atomic | ttft_p50_ms | +10.0% | +10.0% | +1.0 pp | +5.0% / +5.0% |" in \
        fidelity_pairs.markdown(doc)
    assert doc["median"]["s.yaml"]["step_ratio"]["decode"] == {
        "fixed": pytest.approx(1.10), "adaptive": pytest.approx(1.10)}
