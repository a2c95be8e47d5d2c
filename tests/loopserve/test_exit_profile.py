"""Exit profiles: measured λ vectors are the model's own gates; the simulator draws
whole rows from them (one measured prompt per request, or any row per token), keyed by
(seed, request, position), the same in every arm; any
threshold replays from one file; the synthetic fallback stays when no profile is given."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.core import ExitConfig, SamplingParams
from engine.core.shapes import MODEL_SHAPES
from engine.model import build_model
from loopserve.calibrate.exits import generated_prompts, measure_exit_profile
from loopserve.cli import main
from loopserve.plan import plan_runs
from loopserve.runs.loop import execute
from loopserve.schema.scenario import Scenario
from sim.exit_model import profile_row, prompt_rows, request_row
from sim.exit_profile import (
    ExitProfile,
    depth_histogram,
    exit_depth,
    exit_profile_json,
    implied_depths,
    load_exit_profile,
    tv_distance,
)
from tests.reference.dense import dense_hidden
from tests.reference.fixtures import make_llm

PROMPTS = generated_prompts(3, MODEL_SHAPES["tiny"].vocab_size, seed=5, low=6, high=12)
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def measured() -> ExitProfile:
    return measure_exit_profile(model="tiny", prompts=PROMPTS, prompt_source="test",
                                max_tokens=MAX_TOKENS, seed=0)


@pytest.fixture(scope="module")
def profile_file(measured: ExitProfile, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ep") / "tiny.exits.json"
    path.write_text(exit_profile_json(measured))
    return path


def test_profile_lambdas_are_the_models_gates_at_every_depth(measured: ExitProfile) -> None:
    model = build_model("tiny", seed=0)
    d = model.config.total_ut_steps
    assert measured.provenance.num_tokens == len(PROMPTS) * (MAX_TOKENS - 1)
    outs = make_llm(model, "atomic").generate(PROMPTS, SamplingParams(max_tokens=MAX_TOKENS,
                                                                      ignore_eos=True))
    rows = dict(zip(measured.tokens, measured.lambdas, strict=True))
    for i, (prompt, out) in enumerate(zip(PROMPTS, outs, strict=True)):
        seq = prompt + out.output_token_ids[:-1]
        hidden = dense_hidden(model, seq, [d] * len(seq))
        for pos in range(len(prompt), len(seq)):
            want = [float(model.gate(hidden[k][pos][None])[0]) for k in range(d)]
            assert rows[(i, pos)] == pytest.approx(want, abs=1e-5), (i, pos)


def _scenario(profile: str | None, arms: list[str], **exit_kw: Any) -> Scenario:
    return Scenario.model_validate({
        "name": "ep", "model": "tiny", "hardware": "cpu", "cost": {"kind": "roofline"},
        "seed": 3, "arms": arms,
        "scheduler": {"max_num_seqs": 6, "max_num_batched_tokens": 64, "prefill_chunk_size": 32},
        "exit": {"mode": "ouro", "exit_threshold": 0.5, **exit_kw,
                 **({"profile": profile} if profile else {})},
        "workload": {"kind": "poisson", "num_requests": 40, "request_rate": 50.0,
                     "prompt_tokens": 12, "output_tokens": 30},
    })


def _exits(scn: Scenario) -> dict[str, dict[tuple[str, int], int]]:
    plan = plan_runs(scn, "sim")
    out: dict[str, dict[tuple[str, int], int]] = {}
    for r in execute(plan, progress=False):
        out[r.spec.arm] = {(t.request_id, t.index): t.exit_depth for t in r.records.tokens
                           if t.index > 0}
    return out


@pytest.mark.parametrize("mode,threshold", [("ouro", 0.5), ("ouro_delayed", 0.5),
                                            ("ouro", 0.75)])
def test_each_simulated_token_exits_as_its_profile_row_implies(
        profile_file: Path, measured: ExitProfile, mode: str, threshold: float) -> None:
    scn = _scenario(str(profile_file), ["mixed"], mode=mode, exit_threshold=threshold,
                    draw="token")
    (run,) = execute(plan_runs(scn, "sim"), progress=False)
    prompt = {q.request_id: q.prompt_tokens for q in run.records.requests}
    cfg = ExitConfig(mode=mode, exit_threshold=threshold)  # type: ignore[arg-type]
    n, checked = len(measured.lambdas), 0
    for t in run.records.tokens:
        if t.index == 0:
            assert t.exit_depth == 4
            continue
        row = measured.lambdas[profile_row(3, n, t.request_id, prompt[t.request_id] + t.index - 1)]
        assert t.exit_depth == exit_depth(row, cfg, 4)
        checked += 1
    assert checked > 1000
    # ... so the simulated distribution is the profile's, within sampling error.
    sim = depth_histogram([t.exit_depth for t in run.records.tokens if t.index > 0], 4)
    assert tv_distance(sim, depth_histogram(implied_depths(measured, cfg), 4)) < 0.06


def _loops_by_request(run: Any) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t in run.records.tokens:
        if t.index > 0:
            out.setdefault(t.request_id, []).append(t.exit_depth)
    return out


def test_draw_request_keeps_each_request_on_one_measured_prompt(
        profile_file: Path, measured: ExitProfile) -> None:
    """Every token of a request reads a row of the one prompt ``request_row`` picks for it,
    walking that prompt's rows in position order; so requests differ as real ones do."""
    cfg = ExitConfig(mode="ouro", exit_threshold=0.5)
    prompts = prompt_rows(measured.tokens)
    (run,) = execute(plan_runs(_scenario(str(profile_file), ["mixed"]), "sim"), progress=False)
    prompt_len = {q.request_id: q.prompt_tokens for q in run.records.requests}
    picked: dict[str, set[int]] = {}
    for t in run.records.tokens:
        if t.index == 0:
            continue
        k = request_row(3, prompts, t.request_id, prompt_len[t.request_id] + t.index - 1)
        assert t.exit_depth == exit_depth(measured.lambdas[k], cfg, 4)
        picked.setdefault(t.request_id, set()).add(measured.tokens[k][0])
    assert all(len(p) == 1 for p in picked.values())
    assert len(set().union(*picked.values())) == len(PROMPTS)  # every prompt gets requests
    # Consecutive tokens read consecutive rows of their prompt.
    rows = [request_row(3, prompts, "req-0", 100 + i) for i in range(len(prompts[0]) + 1)]
    group = next(g for g in prompts if rows[0] in g)
    assert rows == [group[(group.index(rows[0]) + i) % len(group)] for i in range(len(rows))]
    # Requests differ: the spread of their mean loops is wider than per-token draws give.
    token_run = execute(plan_runs(_scenario(str(profile_file), ["mixed"], draw="token"), "sim"),
                        progress=False)[0]

    def spread(r: Any) -> float:
        return statistics.pstdev(statistics.fmean(v) for v in _loops_by_request(r).values())

    assert spread(run) > 2 * spread(token_run)


def test_same_seed_same_exits_in_every_arm(profile_file: Path) -> None:
    exits = _exits(_scenario(str(profile_file), ["atomic", "per_depth", "mixed"]))
    assert exits["atomic"] == exits["per_depth"] == exits["mixed"]
    assert len(Counter(exits["mixed"].values())) > 1  # really adaptive


def test_the_profile_replaces_the_synthetic_stream_and_env_json_says_so(
        profile_file: Path, tmp_path: Path) -> None:
    synthetic = _exits(_scenario(None, ["mixed"]))["mixed"]
    measured = _exits(_scenario(str(profile_file), ["mixed"]))["mixed"]
    assert synthetic != measured
    scn = tmp_path / "s.yaml"
    scn.write_text(json.dumps(_scenario(str(profile_file), ["mixed"]).model_dump()))
    assert main(["run", str(scn), "--target", "sim", "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 0
    env = json.loads((tmp_path / "o" / "env.json").read_text())
    assert env["exit_model"]["0"]["kind"] == "profile"
    assert env["exit_model"]["0"]["via"] == "exit.profile"
    assert env["exit_model"]["0"]["draw"] == "request"


def test_bad_profiles_are_one_line_errors(profile_file: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "loopserve-exit-profile/1", "model": "tiny"')
    for spec, field in ((str(bad), "exit.profile"), (str(tmp_path / "none.json"), "exit.profile")):
        scn = tmp_path / "s.yaml"
        scn.write_text(json.dumps(_scenario(spec, ["mixed"]).model_dump()))
        assert main(["run", str(scn), "--target", "sim", "--out", str(tmp_path / "o"),
                     "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and field in err
        assert not (tmp_path / "o").exists()
    with pytest.raises(ValueError, match="lambdas"):
        _scenario(str(profile_file), ["mixed"], lambdas=[0.2, 0.3, 0.4, 0.5])


def test_random_lookahead_reads_the_recorded_head_scores(measured: ExitProfile) -> None:
    assert measured.lookahead is not None and measured.lookahead.seed == 0
    cfg = ExitConfig(mode="random_lookahead", exit_threshold=0.5, seed=0)
    assert measured.signal_rows(cfg) is measured.lookahead.scores
    with pytest.raises(ValueError, match="lookahead-seed 7"):
        measured.signal_rows(ExitConfig(mode="random_lookahead", exit_threshold=0.5, seed=7))


def test_exit_profile_command_writes_a_loadable_file(tmp_path: Path) -> None:
    out = tmp_path / "p.exits.json"
    assert main(["exit-profile", "--target", "cpu", "--model", "tiny", "--out", str(out),
                 "--num-prompts", "2", "--max-tokens", "3"]) == 0
    prof = load_exit_profile(out)
    assert prof.provenance.num_tokens == 4 and prof.provenance.checkpoint_sha256 is None
    assert prof.provenance.prompt_source.startswith("generated")
    assert torch.get_num_threads() >= 1


def test_checked_in_small_profile_loads() -> None:
    root = Path(__file__).resolve().parents[2]
    prof = load_exit_profile(root / "results" / "profiles" / "cpu-small.exits.json")
    assert prof.model == "small" and prof.num_depths == 4
    assert prof.provenance.num_tokens == len(prof.lambdas) >= 1000
