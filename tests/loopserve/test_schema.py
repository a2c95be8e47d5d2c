"""Scenario schema, --set overrides, config building, and every bad input -> exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.core.config import CacheConfig
from loopserve.cli import main
from loopserve.errors import UserError
from loopserve.plan.sweep import expand
from loopserve.schema import engine_config, lifetime_bound, load_scenario, model_shape, set_path
from tests.scenario_fixtures import tiny, write_scenario


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_valid_scenario_resolves_aliases_and_defaults(tmp_path: Path) -> None:
    scn = load_scenario(write_scenario(tmp_path, tiny()))
    assert scn.arms == ["atomic", "per_depth", "mixed"]
    assert scn.cache.num_blocks is None and scn.cache.block_size == 4
    assert scn.exit.mode == "fixed"
    assert scn.scheduler.prefill_chunk_size == 8
    assert scn.scheduler.chunk_policy == "reject"  # the core's default


def test_set_overrides_apply_before_validation(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, tiny())
    scn = load_scenario(path, [
        "workload.decode_population=3",
        "scheduler.prompt_shortcut=true",
        "arms=[mixed]",
        "sweep.scheduler.prefill_chunk_size=[4, 8]",
        "exit.mode=categorical",
        "exit.probs=[0.25, 0.25, 0.25, 0.25]",
    ])
    assert scn.workload.decode_population == 3
    assert scn.scheduler.prompt_shortcut is True
    assert scn.arms == ["mixed"]
    assert scn.sweep == {"scheduler.prefill_chunk_size": [4, 8]}
    assert scn.exit.probs == [0.25, 0.25, 0.25, 0.25]


def test_set_path_handles_dotted_sweep_and_variant_keys() -> None:
    data: dict[str, Any] = {"variants": {"a": {}}}
    set_path(data, "sweep.workload.decode_population", [1, 2])
    set_path(data, "variants.a.scheduler.max_num_seqs", 2)
    set_path(data, "cache.block_size", 8)
    assert data == {
        "variants": {"a": {"scheduler.max_num_seqs": 2}},
        "sweep": {"workload.decode_population": [1, 2]},
        "cache": {"block_size": 8},
    }
    with pytest.raises(UserError) as err:
        set_path({"seed": 3}, "seed.value", 1)
    assert err.value.field == "seed.value"


def test_arm_overrides_and_auto_num_blocks(tmp_path: Path) -> None:
    data = tiny(arm_overrides={"A2": {"max_num_seqs": 2, "prompt_shortcut": True}})
    scn = load_scenario(write_scenario(tmp_path, data))
    shape = model_shape(scn.model)
    mixed = engine_config(scn, "mixed", shape, lifetime_tokens=40)
    atomic = engine_config(scn, "atomic", shape, lifetime_tokens=40)
    assert mixed.scheduler.max_num_seqs == 2 and mixed.scheduler.prompt_shortcut
    assert atomic.scheduler.max_num_seqs == 4 and not atomic.scheduler.prompt_shortcut
    per_request = CacheConfig(block_size=4).required_blocks(40, shape.num_depths)
    assert per_request == 40  # ceil(40 / 4) blocks on each of 4 planes
    assert mixed.cache.num_blocks == 2 * per_request
    assert atomic.cache.num_blocks == 4 * per_request


def test_lifetime_bound_covers_injected_prompts() -> None:
    workload = tiny()["workload"]
    # decoders: 8 + 16 - 1 = 23; injected: 24 + 3 - 1 = 26 (not among the timed arrivals)
    assert lifetime_bound(workload, [23, 23]) == 26
    dist = {"prompt_tokens": {"dist": "lognormal", "median": 9, "sigma": 1, "max": 50},
            "output_tokens": {"dist": "uniform", "low": 1, "high": 7}}
    assert lifetime_bound(dist, []) == 56


def test_checkpoint_dir_shape_from_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 100,
        "total_ut_steps": 3,
    }))
    shape = model_shape(str(tmp_path))
    assert (shape.num_layers, shape.head_dim, shape.num_kv_heads, shape.num_depths) == (3, 16, 2, 3)
    scn = load_scenario(write_scenario(tmp_path, tiny(model=str(tmp_path))))
    assert scn.model == str(tmp_path)


def test_sweep_points_are_validated_per_point(tmp_path: Path) -> None:
    data = tiny(arms=["mixed"], sweep={"scheduler.prefill_chunk_size": [4, 8, 14]})
    scn = load_scenario(write_scenario(tmp_path, data))
    points = expand(scn)
    assert [p.scenario.scheduler.prefill_chunk_size for p in points] == [4, 8, 14]
    with pytest.raises(UserError) as err:  # 14 + 4 - 1 > 16: the mixed guard, at build time
        for p in points:
            engine_config(p.scenario, "mixed", model_shape("tiny"), 30)
    assert err.value.field == "scheduler.max_num_batched_tokens"


BAD_TRACE = "arrival_s,prompt_tokens,output_tokens\n0.0,8,4\n0.5,eight,4\n"


@pytest.mark.parametrize(
    ("data", "sets", "field", "words"),
    [
        (tiny(foo=1), [], "foo", "unknown key"),
        (tiny(scheduler={"max_num_seq": 4}), [], "scheduler.max_num_seq", "max_num_seqs"),
        (tiny(scheduler={"max_num_seqs": "many"}), [], "scheduler.max_num_seqs", "integer"),
        (tiny(repeats=2.5), [], "repeats", "integer"),
        (tiny(arms=[]), [], "arms", "empty"),
        (tiny(arms=["A4"]), [], "arms", "unknown arm"),
        (tiny(arms=["A2", "mixed"]), [], "arms", "twice"),
        (tiny(workload=None), [], "workload", "missing"),
        (tiny(model="ouro-99b"), [], "model", "unknown preset"),
        (tiny(cost={"kind": "constant"}), [], "cost.core_call_s", "core_call_s"),
        (tiny(arms=["A2"], scheduler={"max_num_seqs": 4, "max_num_batched_tokens": 8,
                                      "prefill_chunk_size": 8}),
         [], "scheduler.max_num_batched_tokens", "max_num_batched_tokens >= 11"),
        (tiny(exit={"mode": "ouro", "lambdas": [0.5, 0.5]}), [], "exit.lambdas", "4 entries"),
        (tiny(exit={"mode": "fixed", "lambdas": [0.5] * 4}), [], "exit.lambdas", "signal modes"),
        (tiny(exit={"mode": "ouro", "draw": "prompt"}), [], "exit.draw", "'request' or 'token'"),
        (tiny(exit={"mode": "ouro", "lambdas": [0.5] * 4, "draw": "token"}), [], "exit.draw",
         "remove draw or lambdas"),
        (tiny(arm_overrides={"mixed": {"arm": "atomic"}}), [], "arm_overrides.mixed.arm",
         "unknown key"),
        (tiny(sweep={"scheduler.prefill_chunk_size": [8, 32]}), [], "scheduler.prefill_chunk_size",
         "sweep point 1"),
        (tiny(sweep={"repeats": [1, 2]}), [], "sweep.repeats", "cannot be swept"),
        (tiny(sweep={"seed": [[1]]}), [], "sweep.seed.0", "expected a scalar"),
        (tiny(), ["workload.decode_population=2.5"], "workload.decode_population", "integer"),
        (tiny(), ["seed.offset=1"], "seed.offset", "not a section"),
        (tiny(), ["scheduler.nope=1"], "scheduler.nope", "unknown key"),
        (tiny(), ["novalue"], "--set", "key=value"),
        (tiny(), ["workload.kind=lottery"], "workload.kind", "lottery"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    data: dict[str, Any], sets: list[str], field: str, words: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_scenario(tmp_path, data)
    args = ["run", str(path), "--no-progress", *(a for s in sets for a in ("--set", s))]
    code, out, err = run_cli(args, capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"loopserve: error: {field}: "), lines[0]
    assert words in lines[0]
    assert not (tmp_path / "results").exists()


def test_missing_file_yaml_error_and_bad_trace_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    out_dir = tmp_path / "out"
    code, _, err = run_cli(["run", "nope.yaml", "--out", str(out_dir)], capsys)
    assert code == 2 and err.startswith("loopserve: error: scenario: nope.yaml: no such file")

    (tmp_path / "broken.yaml").write_text("name: x\narms: [A0\nseed: 1\n")
    code, _, err = run_cli(["run", "broken.yaml", "--out", str(out_dir)], capsys)
    assert code == 2 and "scenario: broken.yaml:" in err and "YAML syntax error" in err
    assert len(err.strip().splitlines()) == 1

    (tmp_path / "trace.csv").write_text(BAD_TRACE)
    data = tiny(workload={"kind": "trace", "path": "trace.csv"})
    path = write_scenario(tmp_path, data)
    code, _, err = run_cli(["run", str(path), "--out", str(out_dir)], capsys)
    assert code == 2
    assert err.startswith("loopserve: error: workload.path: "), err
    assert "trace.csv:3" in err and "prompt_tokens" in err
    assert not out_dir.exists() and not (tmp_path / "results").exists()


def test_trace_path_resolves_next_to_the_scenario(tmp_path: Path) -> None:
    sub = tmp_path / "scen"
    sub.mkdir()
    (sub / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0.0,8,4\n")
    path = write_scenario(sub, tiny(workload={"kind": "trace", "path": "t.csv"}))
    scn = load_scenario(path)
    assert Path(scn.workload.path) == (sub / "t.csv").resolve()


SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_shipped_scenarios_plan_cleanly(path: Path) -> None:
    from loopserve.plan import plan_runs

    scn = load_scenario(path)
    plan = plan_runs(scn, "sim")
    assert len(plan.runs) == len(plan.points) * scn.repeats * len(scn.arms)


def test_runner_num_threads_is_validated() -> None:
    repo = Path(__file__).resolve().parents[2]
    scn = load_scenario(repo / "scenarios" / "interference-cpu.yaml", [])
    assert scn.runner.num_threads == 1
    with pytest.raises(UserError, match="num_threads"):
        load_scenario(repo / "scenarios" / "interference-cpu.yaml", ["runner.num_threads=0"])
