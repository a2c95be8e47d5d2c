"""``cost: auto`` does not depend on the working directory, and every run records the cost
model that ran: summary.json and env.json ``cost_model``."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from loopserve.cli import main
from tests.scenario_fixtures import tiny, write_scenario

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "results" / "profiles" / "cpu-small.json"


def _project(root: Path) -> Path:
    """A project folder: scenarios/s.yaml (cost auto, cpu, small) and its profile."""
    (root / "scenarios").mkdir(parents=True)
    (root / "results" / "profiles").mkdir(parents=True)
    shutil.copy(PROFILE, root / "results" / "profiles" / PROFILE.name)
    return write_scenario(root / "scenarios", tiny(model="small", hardware="cpu",
                                                   cost={"kind": "auto"}, repeats=1))


def test_auto_resolves_the_same_from_any_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("LOOPSERVE_PROFILES", raising=False)
    scenario = _project(tmp_path / "proj")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "results" / "profiles").mkdir(parents=True)
    (elsewhere / "results" / "profiles" / PROFILE.name).write_text("{}")  # a decoy in the cwd
    outs = []
    for i, cwd in enumerate((tmp_path / "proj", elsewhere, REPO)):
        monkeypatch.chdir(cwd)
        out = tmp_path / f"out{i}"
        assert main(["run", str(scenario), "--no-progress", "--out", str(out)]) == 0, \
            capsys.readouterr().err
        outs.append(out)
    first = (outs[0] / "summary.json").read_bytes()
    assert all((o / "summary.json").read_bytes() == first for o in outs)
    profile = tmp_path / "proj" / "results" / "profiles" / PROFILE.name
    want = {"kind": "calibrated", "requested": "auto", "profile": str(profile.resolve()),
            "profile_sha256": hashlib.sha256(profile.read_bytes()).hexdigest(),
            "hardware": "cpu"}
    for o in outs:
        assert json.loads((o / "summary.json").read_text())["cost_model"] == want
        assert json.loads((o / "env.json").read_text())["cost_model"] == want


def test_the_recorded_cost_model_of_roofline_and_constant(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = write_scenario(tmp_path, tiny(repeats=1, cost={"kind": "roofline"}, variants={
        "roof": {"cost.kind": "roofline"},
        "const": {"cost.kind": "constant", "cost.core_call_s": 0.001}}))
    assert main(["run", str(scenario), "--no-progress", "--out", str(tmp_path / "o")]) == 0, \
        capsys.readouterr().err
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    env = json.loads((tmp_path / "o" / "env.json").read_text())
    assert summary["cost_model"] == env["cost_model"]
    kinds = {p: c["kind"] for p, c in env["cost_model_per_point"].items()}
    assert kinds == {"0": "roofline", "1": "constant"}
    assert env["cost_model_per_point"]["1"] == {"kind": "constant", "requested": "constant",
                                                "profile": None, "profile_sha256": None,
                                                "hardware": "h200"}
