"""`loopserve run` end to end on a tiny scenario: files, columns, determinism, table."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from loopserve.cli import main
from loopserve.outputs.rundata import load_run
from tests.scenario_fixtures import tiny, write_scenario

EXPECTED_FILES = {
    "scenario.yaml", "env.json", "steps.parquet", "requests.parquet", "itl_quantiles.parquet",
    "summary.json", "vllm_results.json", "trace.json.gz", "report.html", "timeline.png",
    "itl_cdf.png", "ttft.png",
}
METRIC_KEYS = {"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"}
STATS = {"mean", "p50", "p90", "p99", "max"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cli")
    path = write_scenario(folder, tiny())
    out = folder / "run"
    code = main(["run", str(path), "--out", str(out), "--no-progress",
                 "--set", "workload.decode_output_tokens=12", "--set", "outputs.tokens=true"])
    assert code == 0
    return out


def header(path: Path) -> list[str]:
    return list(pq.read_schema(path.with_suffix(".parquet")).names)


def test_outputs_exist_with_exact_columns(run_dir: Path) -> None:
    assert EXPECTED_FILES | {"tokens.parquet"} == {p.name for p in run_dir.iterdir()}
    run = ["arm", "point_id", "repeat"]
    assert header(run_dir / "steps.csv") == run + [
        "step", "start_s", "end_s", "stage", "kind", "core_calls", "num_decode_items",
        "num_prompt_items", "num_prompt_tokens", "num_fused_prelude_items", "depths", "mixed",
        "num_readbacks", "max_prompt_items_per_request"]
    assert header(run_dir / "requests.csv") == run + [
        "request_id", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s",
        "finish_s", "injected", "finish_reason"]
    assert header(run_dir / "tokens.csv") == run + [
        "request_id", "index", "time_s", "token_id", "exit_depth"]
    assert not [p for p in run_dir.parent.iterdir() if "partial" in p.name]


def test_tables_hold_every_run(run_dir: Path) -> None:
    run = load_run(run_dir)
    rows = run.requests
    keys = set(zip(rows["arm"], rows["repeat"], strict=True))
    assert keys == {(a, r) for a in ("atomic", "per_depth", "mixed") for r in (0, 1)}
    injected = rows[rows["injected"]]
    assert len(injected) == 6 and set(injected["request_id"]) == {"inject-0"}
    tokens = run.tokens
    first = tokens[tokens["index"] == 0]
    assert len(first) and (first["exit_depth"] == 4).all()  # the first token runs all D
    decode0 = tokens[(tokens["request_id"] == "decode-0") & (tokens["arm"] == "mixed")
                     & (tokens["repeat"] == 0)]
    assert len(decode0) == 12  # the --set value reached the workload


def test_summary_json_shape(run_dir: Path) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary) == {"points", "runs", "medians", "spread_method", "exit_depth_counts",
                            "cost_model"}
    assert summary["cost_model"]["kind"] == "constant"
    assert summary["points"] == [{"point_id": 0, "values": {}}]
    assert len(summary["runs"]) == 6 and len(summary["medians"]) == 3
    run = summary["runs"][0]
    assert {"arm", "target", "point_id", "repeat", "valid", "invalid_reason", "output_tok_s",
            "prompt_token_loops_s", "num_requests", "num_core_calls", "num_mixed_core_calls",
            "wall_s"} | METRIC_KEYS <= set(run)
    assert all(set(run[k]) == STATS for k in METRIC_KEYS)
    assert run["target"] == "sim" and run["wall_s"] is None
    med = {m["arm"]: m for m in summary["medians"]}
    assert med["mixed"]["num_repeats"] == 2 and med["mixed"]["valid"]
    assert med["mixed"]["num_mixed_core_calls"] > 0


def test_vllm_results_beside_the_summary(run_dir: Path) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    results = json.loads((run_dir / "vllm_results.json").read_text())
    assert [(r["arm"], r["repeat"]) for r in results] == [
        (r["arm"], r["repeat"]) for r in summary["runs"]]
    for r, s in zip(results, summary["runs"], strict=True):
        assert r["completed"] == s["num_requests"] and r["failed"] == 0
        assert r["p99_itl_ms"] == pytest.approx(s["itl_ms"]["p99"])
        assert r["median_ttft_ms"] == pytest.approx(s["ttft_ms"]["p50"])


def test_resolved_scenario_and_env(run_dir: Path) -> None:
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    assert resolved["workload"]["decode_output_tokens"] == 12  # after --set
    assert resolved["arms"] == ["atomic", "per_depth", "mixed"]
    assert resolved["scheduler"]["chunk_policy"] == "reject"  # defaults written out
    env = json.loads((run_dir / "env.json").read_text())
    assert env["device"]["target"] == "sim" and env["device"]["simulated_hardware"] == "h200"
    assert "--set" in env["command"] and env["versions"]["python"]
    assert len(env["runs_wall_s"]) == 6
    trace = json.loads(gzip.decompress((run_dir / "trace.json.gz").read_bytes()))
    assert trace["otherData"] == {"max_steps_per_run": 20_000, "truncated_runs": []}
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {"atomic · point 0", "per_depth · point 0", "mixed · point 0"}


def test_same_scenario_and_seed_give_identical_bytes(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = run_dir.parent / "scenario.yaml"
    same = tmp_path / "same"
    assert main(["run", str(original), "--out", str(same), "--no-progress",
                 "--set", "workload.decode_output_tokens=12", "--set", "outputs.tokens=true"]) == 0
    # the resolved scenario.yaml reruns to the same bytes too
    out = tmp_path / "again"
    assert main(["run", str(run_dir / "scenario.yaml"), "--out", str(out), "--no-progress"]) == 0
    for folder in (same, out):
        for name in ("summary.json", "vllm_results.json", "tokens.parquet", "steps.parquet",
                     "requests.parquet", "itl_quantiles.parquet", "trace.json.gz"):
            assert (folder / name).read_bytes() == (run_dir / name).read_bytes(), name
    assert (same / "env.json").read_bytes() != (run_dir / "env.json").read_bytes()
    printed = capsys.readouterr().out
    assert printed.splitlines()[1].split() == ["arm", "ITL", "p50", "ITL", "p99", "TTFT", "p50",
                                                "TTFT", "p99", "out", "tok/s", "validity"]
    assert {line.split()[0] for line in printed.splitlines()[3:6]} == {
        "atomic", "per_depth", "mixed"}
    assert f"report: {out / 'report.html'}" in printed


def test_default_destination_and_existing_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_scenario(tmp_path, tiny(repeats=1, arms=["A2"]))
    assert main(["run", str(path), "--no-progress"]) == 0
    (run,) = (tmp_path / "results" / "tiny").iterdir()
    assert run.name.endswith("-sim") and (run / "report.html").is_file()
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(run), "--no-progress"]) == 2
    assert capsys.readouterr().err.startswith("loopserve: error: --out: ")


def test_sweep_command_requires_a_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_scenario(tmp_path, tiny(repeats=1))
    assert main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("loopserve: error: sweep: missing")
    assert not (tmp_path / "o").exists()
    code = main(["sweep", str(path), "--out", str(tmp_path / "o"), "--no-progress",
                 "--set", "sweep.workload.decode_population=[1, 2]", "--set", "arms=[A2]"])
    assert code == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert [p["values"] for p in summary["points"]] == [
        {"workload.decode_population": 1}, {"workload.decode_population": 2}]
    assert (tmp_path / "o" / "sweep_workload_decode_population.png").is_file()


def test_cpu_target_runs_the_real_engine(tmp_path: Path) -> None:
    workload = dict(tiny()["workload"], decode_output_tokens=8,
                    inject=[{"at_decode_tokens": 2, "prompt_tokens": 12, "output_tokens": 2}])
    data = tiny(arms=["A2"], repeats=1, workload=workload,
                runner={"warmup": False, "dtype": "float32"})
    path = write_scenario(tmp_path, data)
    out = tmp_path / "cpu"
    assert main(["run", str(path), "--target", "cpu", "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    (run,) = summary["runs"]
    assert run["target"] == "cpu" and run["wall_s"] > 0
    assert run["num_requests"] == 3 and run["valid"], run["invalid_reason"]
    env = json.loads((out / "env.json").read_text())
    assert env["versions"]["torch"]  # the real engine imported torch
    # auto resolved on the CPU: the backend that ran is recorded and shown in the report.
    assert env["runner"] == {"attention_backend": "torch", "requested": "auto",
                             "dtype": "float32", "cuda_graphs": "off"}
    assert "attention torch, float32" in (out / "report.html").read_text()


def test_simulated_steps_carry_rfc4s_readback_count(run_dir: Path) -> None:
    steps = load_run(run_dir).steps
    by_kind = {k: set(g["num_readbacks"]) for k, g in steps.groupby("kind")}
    assert by_kind["coda"] == {1}  # the sampled tokens; fixed exits need no gate readback
    assert all(v == {0} for k, v in by_kind.items() if k != "coda"), by_kind
