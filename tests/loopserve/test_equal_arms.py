"""Equal arms (RFC §6): arms that would run different budget, max_num_seqs or chunk are
refused unless ``allow_unequal_arms``; ``chunk_policy: derive`` gives every arm one chunk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from loopserve.cli import main
from loopserve.plan import plan_runs
from loopserve.schema import load_scenario
from tests.scenario_fixtures import tiny, write_scenario


@pytest.mark.parametrize("override,field", [
    ({"max_num_seqs": 2}, "scheduler.max_num_seqs"),
    ({"max_num_batched_tokens": 32}, "scheduler.max_num_batched_tokens"),
    ({"prefill_chunk_size": 4}, "scheduler.prefill_chunk_size"),
])
def test_unequal_arms_are_refused_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], override: dict[str, int],
        field: str) -> None:
    path = write_scenario(tmp_path, tiny(arm_overrides={"A1": override}))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"loopserve: error: {field}:")
    assert "allow_unequal_arms: true" in err
    assert not out.exists()


def test_readback_skip_per_arm_is_not_unequal(tmp_path: Path) -> None:
    scn = load_scenario(write_scenario(tmp_path, tiny(
        arm_overrides={"A0": {"readback_skip": False}})))
    assert [p.unequal_arms for p in plan_runs(scn, "sim").points] == [[]]


def test_allowed_unequal_arms_run_and_the_report_flags_them(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, tiny(arm_overrides={"A2": {"max_num_seqs": 2}},
                                         allow_unequal_arms=True, repeats=1))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    env = json.loads((out / "env.json").read_text())
    assert env["unequal_arms"] == {"0": ["max_num_seqs: atomic 4, per_depth 4, mixed 2"]}
    assert "UNEQUAL ARMS" in (out / "report.html").read_text()


def test_equal_arms_report_no_flag(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["run", str(write_scenario(tmp_path, tiny(repeats=1))), "--out", str(out),
                 "--no-progress"]) == 0
    assert "unequal_arms" not in json.loads((out / "env.json").read_text())
    assert "UNEQUAL ARMS" not in (out / "report.html").read_text()


def test_derive_gives_every_arm_one_chunk_logged_once_and_recorded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 8 + 12 - 1 > 16 fails the mixed guard: derive 16 - 12 + 1 = 5 for all three arms
    sched = {"max_num_seqs": 12, "max_num_batched_tokens": 16, "prefill_chunk_size": 8,
             "chunk_policy": "derive"}
    path = write_scenario(tmp_path, tiny(scheduler=sched, repeats=1))
    plan = plan_runs(load_scenario(path), "sim")
    assert {r.cfg.scheduler.effective_chunk_size for r in plan.runs} == {5}
    assert plan.derived_chunks == {0: 5}
    capsys.readouterr()
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.count("chunk_policy derive") == 1 and "8 -> 5" in err
    text = (out / "scenario.yaml").read_text()
    assert text.startswith("# chunk_policy derive: effective prefill chunk of every arm "
                           "(point 0: 5)")
    assert yaml.safe_load(text)["scheduler"]["chunk_policy"] == "derive"
    assert load_scenario(out / "scenario.yaml").scheduler.prefill_chunk_size == 8
    assert json.loads((out / "env.json").read_text())["derived_chunks"] == {"0": 5}
    # every arm's prompt items are at most 5 tokens long
    import pandas as pd
    steps = pd.read_parquet(out / "steps.parquet")
    prompt = steps[(steps.num_prompt_items > 0) & (steps.stage != "PRELUDE")]
    assert set(prompt.arm) == {"atomic", "per_depth", "mixed"}
    assert (prompt.num_prompt_tokens <= 5 * prompt.num_prompt_items).all()
    assert (prompt.num_prompt_tokens == 5 * prompt.num_prompt_items).any()
