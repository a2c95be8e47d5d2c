"""``loopserve profile``: torch.profiler's host-sync sites against the runner's readbacks, per
arm and step, on the CPU runner; a hidden sync makes it fail loudly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from engine.runner import ModelRunner
from loopserve.cli import main
from tests.scenario_fixtures import tiny, write_scenario


def _scenario(tmp_path: Path) -> Path:
    return write_scenario(tmp_path, tiny(
        repeats=1, exit={"mode": "ouro", "exit_threshold": 1.0},
        arm_overrides={"A0": {"readback_skip": False}},
        runner={"attention_backend": "torch", "warmup": False, "num_threads": 1}))


def test_profiler_and_runner_agree_per_arm_and_step(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["profile", str(_scenario(tmp_path)), "--target", "cpu", "--steps", "60",
                 "--out", str(out)]) == 0
    doc = json.loads((out / "profile.json").read_text())
    assert set(doc["arms"]) == {"atomic", "per_depth", "mixed"}
    for arm, s in doc["arms"].items():
        assert (out / s["trace"]).is_file()
        assert s["num_steps"] == 60
        assert s["profiler_syncs"] == s["runner_readbacks"] > 0
        assert all(r["profiler_syncs"] == r["runner_readbacks"] for r in s["per_step"])
        assert s["per_kind"]["coda"]["profiler_syncs"] == s["per_kind"]["coda"]["steps"]
        decode = s["per_kind"]["decode"]
        # RFC §4: A0 (readback_skip off) reads the unused gate back on every decode loop
        assert decode["profiler_syncs"] == (decode["steps"] if arm == "atomic" else 0)
    assert "mixed" in doc["arms"]["mixed"]["per_kind"]


def test_a_hidden_sync_fails_loudly(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    inner = ModelRunner.execute

    def execute(self, batch):  # type: ignore[no-untyped-def]
        torch.ones(1).sum().item()  # a readback the runner does not count
        return inner(self, batch)

    monkeypatch.setattr(ModelRunner, "execute", execute)
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["profile", str(_scenario(tmp_path)), "--target", "cpu", "--steps", "20",
                 "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "loopserve: error: profile: atomic: the profiler saw" in err
    assert "step 0 (" in err
    assert (out / "profile.json").is_file()  # written, for reading what differed
