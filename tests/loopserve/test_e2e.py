"""`loopserve e2e` on the tiny model with a handful of requests: every arm through a
`loopserve serve` subprocess, the simulation beside it, one report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from loopserve.bench.synthetic import write
from loopserve.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _scenario(tmp_path: Path, **workload: object) -> Path:
    data = yaml.safe_load((ROOT / "scenarios/e2e-cpu.yaml").read_text())
    data.update(model="tiny", arms=["atomic", "mixed"], cost={"kind": "roofline"})
    data["workload"].update(path=str(write(tmp_path / "sg.json", 20, seed=2, prompt_words=6,
                                           reply_words=4)), num_requests=5,
                            request_rate=20.0, **workload)
    path = tmp_path / "e2e.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_e2e_serves_every_arm_beside_the_simulation(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["e2e", str(_scenario(tmp_path)), "--out", str(out), "--no-progress"]) == 0
    assert {p.name for p in out.iterdir()} == {
        "scenario.yaml", "requests.jsonl", "e2e.json", "report.md", "client-atomic.json",
        "client-mixed.json", "server-atomic.log", "server-mixed.log"}
    doc = json.loads((out / "e2e.json").read_text())
    requests = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    want_out = sum(r["output_tokens"] for r in requests)
    assert len(requests) == 5 and requests[0]["arrival_s"] == 0.0
    for arm in ("atomic", "mixed"):
        a = doc["arms"][arm]
        assert a["server_exit"] == 0
        for world in ("client", "sim"):
            assert (a[world]["completed"], a[world]["failed"]) == (5, 0)
            assert a[world]["total_output_tokens"] == want_out
            assert a[world]["total_input_tokens"] == sum(r["prompt_tokens"] for r in requests)
        assert a["core_calls"] > 0 and a["sim_core_calls"] > 0
        client = json.loads((out / f"client-{arm}.json").read_text())
        assert client["output_lens"] == [r["output_tokens"] for r in requests]
    assert doc["arms"]["atomic"]["mixed_core_calls"] == 0  # atomic never mixes
    table = (out / "report.md").read_text()
    assert table.count("| client |") == 2 and table.count("| sim |") == 2
    assert table in capsys.readouterr().out


def test_e2e_needs_a_sharegpt_workload(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    scn = yaml.safe_load(_scenario(tmp_path).read_text())
    scn["workload"] = {"kind": "poisson", "num_requests": 3, "request_rate": 1.0,
                       "prompt_tokens": 4, "output_tokens": 4}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(scn))
    assert main(["e2e", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith("loopserve: error: workload.kind: e2e replays")
    assert not (tmp_path / "x").exists()


def test_e2e_two_replicas_round_robin_beside_the_simulated_cluster(tmp_path: Path) -> None:
    scn = yaml.safe_load(_scenario(tmp_path).read_text())
    scn.update(arms=["mixed"], cluster={"replicas": 2, "router": "round_robin"})
    scn["workload"]["num_requests"] = 6
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(scn))
    out = tmp_path / "run"
    assert main(["e2e", str(tmp_path / "c.yaml"), "--out", str(out), "--no-progress"]) == 0
    assert {p.name for p in out.iterdir()} >= {"server-mixed-0.log", "server-mixed-1.log"}
    doc = json.loads((out / "e2e.json").read_text())
    a = doc["arms"]["mixed"]
    assert doc["num_replicas"] == 2 and a["server_exit"] == 0
    # each server's /metrics counted its share of the replay: requests 0, 2, 4 and 1, 3, 5
    assert [r["requests"] for r in a["replicas"]] == [3, 3]
    assert [r["requests"] for r in a["sim_replicas"]] == [3, 3]
    assert all(r["core_calls"] > 0 for r in a["replicas"] + a["sim_replicas"])
    assert a["core_calls"] == sum(r["core_calls"] for r in a["replicas"])
    for world in ("client", "sim"):
        assert (a[world]["completed"], a[world]["failed"]) == (6, 0)
    table = (out / "report.md").read_text()
    assert "2 replicas round-robin" in table and "mixed: client [3, 3], sim [3, 3]" in table


def test_e2e_refuses_a_router_it_cannot_match(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    scn = yaml.safe_load(_scenario(tmp_path).read_text())
    scn["cluster"] = {"replicas": 2, "router": "least_outstanding"}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(scn))
    assert main(["e2e", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopserve: error: cluster.router: e2e sends requests round-robin")
    assert err.count("\n") == 1 and not (tmp_path / "x").exists()
