"""Exit regimes: rows measured with the exits on are the depths the real runner
takes; a simulation of the same policy replays them (a workload's own tokens token for token);
another policy falls back to the full-depth rows; bad regimes and flags are one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from engine.core import ExitConfig, SamplingParams
from engine.core.exits import OuroExit
from engine.core.shapes import MODEL_SHAPES
from loopserve.calibrate.exits import generated_prompts, measure_exit_profile
from loopserve.cli import main
from loopserve.plan import plan_runs
from loopserve.runs.loop import execute
from loopserve.schema.scenario import Scenario
from sim.exit_model import profile_signal_fn
from sim.exit_profile import ExitProfile, exit_profile_json, implied_depths, load_exit_profile
from sim.exit_regime import ExitRegime
from tests.reference.fixtures import make_llm

PROMPTS = generated_prompts(4, MODEL_SHAPES["tiny"].vocab_size, seed=9, low=6, high=12)
POLICY = ExitConfig(mode="ouro", exit_threshold=0.5)


@pytest.fixture(scope="module")
def measured() -> ExitProfile:
    return measure_exit_profile(model="tiny", prompts=PROMPTS, prompt_source="test",
                                max_tokens=8, regimes=[POLICY])


def test_regime_rows_hold_the_depths_the_runner_took(measured: ExitProfile) -> None:
    from engine.model import build_model

    outs = make_llm(build_model("tiny", seed=0), "mixed", exit=POLICY).generate(
        PROMPTS, SamplingParams(max_tokens=8, ignore_eos=True))
    taken = [d for o in outs for d in o.exit_depths[1:]]
    regime = measured.regime_for(POLICY, "last_exited")
    assert regime is not None and len(regime.signals) == len(taken)
    assert implied_depths(measured, POLICY) == taken  # another arm, the same depths
    assert [sum(v is not None for v in row) for row in regime.signals] == taken
    assert len(set(taken)) > 1  # really adaptive


def test_another_policy_or_layout_falls_back_to_the_full_depth_rows(
        measured: ExitProfile) -> None:
    other = ExitConfig(mode="ouro", exit_threshold=0.7)
    assert measured.regime_for(other, "last_exited") is None
    assert measured.regime_for(POLICY, "shared") is None
    assert measured.rows_for(other, "last_exited") is measured.lambdas


def _scenario(profile: str | None, target_arms: list[str], **kw: Any) -> Scenario:
    return Scenario.model_validate({
        "name": "rg", "model": "tiny", "hardware": "cpu", "cost": {"kind": "roofline"},
        "seed": 4, "repeats": 2, "arms": target_arms,
        "scheduler": {"max_num_seqs": 6, "max_num_batched_tokens": 64, "prefill_chunk_size": 32},
        "exit": {"mode": "ouro", "exit_threshold": 0.5,
                 **({"profile": profile} if profile else {})},
        "workload": {"kind": "poisson", "num_requests": 6, "request_rate": 40.0,
                     "prompt_tokens": 10, "output_tokens": 12},
        "runner": {"warmup": False}, **kw,
    })


def _depths(scn: Scenario, target: str) -> dict[tuple[int, str, int], int]:
    return {(r.spec.repeat, t.request_id, t.index): t.exit_depth
            for r in execute(plan_runs(scn, target), progress=False)
            for t in r.records.tokens}


def test_simulation_replays_the_workloads_own_tokens_exactly(tmp_path: Path) -> None:
    scn_file = tmp_path / "rg.yaml"
    scn_file.write_text(json.dumps(_scenario(None, ["mixed"]).model_dump()))
    out = tmp_path / "own.exits.json"
    assert main(["exit-profile", "--target", "cpu", "--scenario", str(scn_file),
                 "--out", str(out)]) == 0
    prof = load_exit_profile(out)
    assert prof.regimes is not None and prof.regimes[0].sources is not None
    real = _depths(_scenario(None, ["atomic"]), "cpu")
    sim = _depths(_scenario(str(out), ["per_depth", "mixed"]), "sim")
    assert sim == real  # every token of both repeats, in an arm the profile never ran
    assert len(set(real.values())) > 1
    # Drawn from other seeds' rows instead, the tokens no longer are their own.
    ind = tmp_path / "ind.exits.json"
    assert main(["exit-profile", "--target", "cpu", "--scenario", str(scn_file),
                 "--independent", "--out", str(ind)]) == 0
    assert _depths(_scenario(str(ind), ["mixed"]), "sim") != real


def test_a_row_read_past_its_exit_is_a_bug_not_a_value() -> None:
    fn = profile_signal_fn(0, [[0.1, None]])
    assert fn("r", 3, 0) == 0.1
    assert math.isnan(fn("r", 3, 1))  # read back unused with readback_skip off: fine
    decider = OuroExit(0.5, 1, 3, delayed=False)
    decider.start_token(1)
    with pytest.raises(ValueError, match="missing gate signal"):
        decider.after_depth(2, fn("r", 3, 1))  # a decider that needs it: a policy mismatch


@pytest.mark.parametrize("signals,match", [
    ([[None, 0.2]], "depths run first"),
    ([[None, None]], "depths run first"),
    ([[float("nan"), None]], "non-finite"),
])
def test_bad_regime_rows_are_rejected(signals: list[list[float | None]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ExitRegime(mode="ouro", exit_threshold=0.5, max_loops=2, tokens=[(0, 3)],
                   signals=signals)


def test_regime_rows_of_the_wrong_width_are_rejected(measured: ExitProfile) -> None:
    data = json.loads(exit_profile_json(measured))
    data["regimes"][0]["signals"][0] = data["regimes"][0]["signals"][0][:-1]
    with pytest.raises(ValueError, match="rows need"):
        ExitProfile.model_validate(data)


@pytest.mark.parametrize("argv,field", [
    (["--regimes", "fixed@0.5"], "--regimes"),
    (["--regimes", "ouro@high"], "--regimes"),
    (["--regimes", "ouro@1.5"], "--regimes"),
    (["--regimes", "ouro@0.5,ouro@0.5"], "--regimes"),
    (["--repeats", "2"], "--repeats"),
    (["--independent"], "--independent"),
])
def test_bad_exit_profile_flags_are_one_line_errors(
        argv: list[str], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.exits.json"
    assert main(["exit-profile", "--target", "cpu", "--model", "tiny", "--out", str(out),
                 *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err
    assert not out.exists()


def test_exit_profile_path_resolves_beside_the_scenario(
        measured: ExitProfile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loopserve.schema import load_scenario

    folder = tmp_path / "scn"
    folder.mkdir()
    (folder / "p.exits.json").write_text(exit_profile_json(measured))
    data = _scenario(None, ["mixed"]).model_dump()
    data["exit"]["profile"] = "p.exits.json"
    (folder / "s.yaml").write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path)  # not the scenario's folder
    plan = plan_runs(load_scenario(folder / "s.yaml"), "sim")
    exits = plan.points[0].exits
    assert exits is not None and exits.path == str((folder / "p.exits.json").resolve())
    assert exits.rows is not None and exits.rows.startswith("regime ouro@0.5")
