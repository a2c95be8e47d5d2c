"""`loopserve tune` on a tiny poisson scenario: the folder's files, the best at least the
default, `loopserve capacity best.yaml` reproducing the claimed capacity, byte-identical
reruns, an interrupted search resumed from its folder, Ray equal to one process, and
one-line errors for bad input."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from loopserve.cli import main
from loopserve.runs.interrupts import Interrupted
from loopserve.tune import rounds
from tests.scenario_fixtures import tiny, write_scenario

POISSON = {"kind": "poisson", "num_requests": 16, "request_rate": 20.0,
           "prompt_tokens": {"dist": "uniform", "low": 4, "high": 20},
           "output_tokens": {"dist": "uniform", "low": 2, "high": 8}}
SLO = {"ttft_p99_ms": 60.0, "itl_p99_ms": 20.0}
TUNE = {"scheduler.max_num_seqs": [2, 4], "scheduler.prefill_chunk_size": [8, 16],
        "arm": ["atomic", "mixed"]}
FILES = {"tune.json", "tune.csv", "best.yaml", "pareto.png", "report.md", "env.json",
         "probes.jsonl", "search.json"}
FLAGS = ["--no-progress", "--tolerance", "0.2"]


def scenario(folder: Path, **changes: Any) -> Path:
    return write_scenario(folder, tiny(**{"workload": POISSON, "repeats": 1, "slo": SLO,
                                          "arms": ["atomic", "mixed"], "tune": TUNE,
                                          **changes}))


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tune")
    out = folder / "tune"
    assert main(["tune", str(scenario(folder)), "--out", str(out), *FLAGS]) == 0
    return out


def _doc(out: Path) -> dict[str, Any]:
    return json.loads((out / "tune.json").read_text())  # type: ignore[no-any-return]


def test_files_ranking_and_gain(tuned: Path) -> None:
    assert {p.name for p in tuned.iterdir()} == FILES
    doc = _doc(tuned)
    entries = {e["config_id"]: e for e in doc["configurations"]}
    s = doc["summary"]
    best, default = entries[s["best_config_id"]], entries[s["default_config_id"]]
    assert default["is_default"] and default["status"] == "found"
    assert best["capacity_req_s"] >= default["capacity_req_s"]
    assert s["gain_over_default"] == best["capacity_req_s"] / default["capacity_req_s"]
    # mixed with chunk 16 + 4 seqs - 1 > budget 16 breaks the guard: listed, never run
    rejected = [e for e in doc["configurations"] if e["status"] == "rejected"]
    assert rejected and all(e["arm"] == "mixed" and "mixed arm needs" in e["reason"]
                            for e in rejected)
    for e in doc["configurations"]:
        if e["status"] == "found":
            assert e["low_req_s"] < e["high_req_s"]
            assert e["bound_by"] in ("TTFT", "ITL")
            assert e["at_capacity"]["itl_p99_ms"] <= SLO["itl_p99_ms"]
    assert s["num_probes"] == sum(e["num_probes"] for e in doc["configurations"])
    assert len((tuned / "tune.csv").read_text().splitlines()) == 1 + len(entries)


def test_capacity_of_best_yaml_reproduces_the_claim(tuned: Path, tmp_path: Path) -> None:
    doc = _doc(tuned)
    best = next(e for e in doc["configurations"]
                if e["config_id"] == doc["summary"]["best_config_id"])
    out = tmp_path / "cap"
    assert main(["capacity", str(tuned / "best.yaml"), "--out", str(out), *FLAGS]) == 0
    (arm,) = json.loads((out / "capacity.json").read_text())["arms"]
    assert arm["arm"] == best["arm"]
    assert best["low_req_s"] <= arm["capacity_req_s"] < best["high_req_s"]


def test_a_rerun_gives_the_same_tune_json(tuned: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    assert main(["tune", str(scenario(tmp_path)), "--out", str(out), *FLAGS]) == 0
    assert (out / "tune.json").read_bytes() == (tuned / "tune.json").read_bytes()


def test_an_interrupted_search_resumes_from_its_folder(
        tuned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    real = rounds.run_probe
    calls: list[float] = []

    def interrupted(*args: Any) -> Any:
        if len(calls) == 5:
            raise Interrupted(signal.SIGINT)
        calls.append(args[1])
        return real(*args)

    monkeypatch.setattr(rounds, "run_probe", interrupted)
    out = tmp_path / "resumed"
    path = str(scenario(tmp_path))
    assert main(["tune", path, "--out", str(out), *FLAGS]) == 130
    assert "5 probes kept" in capsys.readouterr().err
    assert not (out / "tune.json").exists()
    assert len((out / "probes.jsonl").read_text().splitlines()) == 5
    monkeypatch.setattr(rounds, "run_probe", real)
    assert main(["tune", path, "--out", str(out), *FLAGS]) == 0
    assert (out / "tune.json").read_bytes() == (tuned / "tune.json").read_bytes()
    total = _doc(out)["summary"]["num_probes"]
    assert len((out / "probes.jsonl").read_text().splitlines()) == total


def test_ray_gives_the_sequential_tune_json(tuned: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    assert main(["tune", str(scenario(tmp_path)), "--out", str(out), "--workers", "2",
                 *FLAGS]) == 0
    assert (out / "tune.json").read_bytes() == (tuned / "tune.json").read_bytes()


@pytest.mark.parametrize(("tune", "flags", "expected"), [
    ({"scheduler.bogus": [1, 2]}, [], "tune.scheduler.bogus: 1 is rejected in every "
                                      "configuration (scheduler.bogus: unknown key"),
    ({"scheduler.max_num_seqs": []}, [], "tune.scheduler.max_num_seqs: empty list"),
    ({"scheduler.max_num_seqs": [0, 4]}, [], "tune.scheduler.max_num_seqs: 0 is rejected in "
                                             "every configuration"),
    ({"name": ["a"]}, [], "tune.name: cannot be tuned"),
    (TUNE, ["--budget", "0"], "--budget: must be at least 1 probe"),
    (TUNE, ["--top", "0"], "--top: must be an integer >= 1"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          tune: dict[str, Any], flags: list[str],
                                          expected: str) -> None:
    out = tmp_path / "out"
    code = main(["tune", str(scenario(tmp_path, tune=tune)), "--out", str(out), *flags])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"loopserve: error: {expected}"), err
    assert err.count("\n") == 1
    assert not out.exists()


def test_verify_runs_the_best_on_the_cpu_engine_interleaved(
        tuned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loopserve.tune import verify

    order: list[tuple[float, int]] = []
    real = verify.run_checked

    def spy(plan: Any, target: Any, point: Any, spec: Any) -> Any:
        order.append((plan.scenario.workload.request_rate, spec.repeat))
        return real(plan, target, point, spec)

    monkeypatch.setattr(verify, "run_checked", spy)
    out = tmp_path / "verified"
    path = scenario(tmp_path, repeats=2, runner={"warmup": False})
    assert main(["tune", str(path), "--out", str(out), "--verify", "cpu", "--top", "2",
                 *FLAGS]) == 0
    doc = _doc(out)
    rows = json.loads((out / "verify.json").read_text())
    ranking = doc["summary"]["ranking"][:2]
    assert [(r["config_id"], r["factor"]) for r in rows] == [
        (c, f) for c in ranking for f in (1.0, 0.8)]
    by_id = {e["config_id"]: e for e in doc["configurations"]}
    for r in rows:
        assert r["rate"] == by_id[r["config_id"]]["capacity_req_s"] * r["factor"]
        assert set(r["measured"]) == set(SLO) and all(
            v is not None and v > 0 for v in r["measured"].values())
        assert 0 <= r["measured_goodput_fraction"] <= 1
        if r["factor"] == 1.0:  # the simulation at capacity is the search's own probe
            at_cap = by_id[r["config_id"]]["at_capacity"]
            assert r["predicted_meets"] and r["predicted"] == {k: at_cap[k] for k in SLO}
    # every (configuration, rate) once per repeat, repeat 0 of all before repeat 1 of any
    assert [rep for _, rep in order] == [0] * 4 + [1] * 4
    assert "Verified on the real engine" in (out / "report.md").read_text()
    assert "verify" not in doc


def test_per_gpu_objective_and_a_budget(tuned: Path, tmp_path: Path) -> None:
    path = str(scenario(tmp_path))
    out = tmp_path / "per-gpu"
    assert main(["tune", path, "--out", str(out), "--objective", "capacity_per_gpu",
                 *FLAGS]) == 0
    doc, ref = _doc(out), _doc(tuned)
    assert doc["summary"]["ranking"] == ref["summary"]["ranking"]  # one GPU each
    for e in doc["configurations"]:
        assert e["capacity_per_gpu"] == e["capacity_req_s"] and e["num_gpus"] == 1
    out = tmp_path / "budget"
    assert main(["tune", path, "--out", str(out), "--budget", "3", *FLAGS]) == 0
    doc = _doc(out)
    assert doc["summary"]["num_probes"] == 3
    assert {e["status"] for e in doc["configurations"]} == {"budget", "rejected"}
    assert doc["summary"]["best_config_id"] is None and not (out / "best.yaml").exists()
