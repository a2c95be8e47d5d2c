"""The scenario's ``cluster`` section through the CLI: one replica writes the plain run's
tables and summary (plus the cluster's own columns and keys), a disaggregated run's tables
and TTFT split, cluster fields swept like any field, capacity on a cluster, same bytes on a
rerun and from Ray workers, and one-line errors for a bad section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from loopserve.cli import main
from loopserve.outputs.records import CLUSTER_REQUESTS_SCHEMA, PD_REQUESTS_SCHEMA
from tests.scenario_fixtures import tiny, write_scenario

POISSON = {"kind": "poisson", "num_requests": 16, "request_rate": 40.0,
           "prompt_tokens": {"dist": "uniform", "low": 4, "high": 20},
           "output_tokens": {"dist": "uniform", "low": 2, "high": 8}}
CLUSTER_KEYS = {"num_replicas", "output_tok_s_per_gpu", "replica_utilisation",
                "load_imbalance", "ttft_queue_ms", "ttft_prefill_ms", "ttft_transfer_ms"}
PD = {"prefill_replicas": 1, "decode_replicas": 2,
      "kv_transfer": {"bandwidth_gbps": 0.01, "latency_us": 50}}


def run(tmp_path: Path, name: str, *flags: str, **changes: Any) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    path = write_scenario(folder, tiny(**{"workload": POISSON, "repeats": 1, **changes}))
    out = folder / "out"
    assert main(["run", str(path), "--out", str(out), "--no-progress", *flags]) == 0
    return out


def _summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


def test_one_replica_writes_the_plain_tables_and_summary(tmp_path: Path) -> None:
    plain = run(tmp_path, "plain")
    one = run(tmp_path, "one", cluster={"replicas": 1, "router": "least_kv"})
    for table in ("steps", "requests", "itl_quantiles"):
        a = pd.read_parquet(plain / f"{table}.parquet")
        b = pd.read_parquet(one / f"{table}.parquet")
        pd.testing.assert_frame_equal(a, b[list(a.columns)])  # every arm
    b = pd.read_parquet(one / "requests.parquet")
    assert (b["replica"] == 0).all()
    ps, os_ = _summary(plain), _summary(one)
    for row_a, row_b in zip(ps["runs"] + ps["medians"], os_["runs"] + os_["medians"],
                            strict=True):
        assert set(row_b) - set(row_a) == CLUSTER_KEYS
        assert {k: row_b[k] for k in row_a if k != "spread"} == \
            {k: v for k, v in row_a.items() if k != "spread"}
    r = os_["runs"][0]
    assert r["num_replicas"] == 1 and r["load_imbalance"] == 1.0
    assert r["output_tok_s_per_gpu"] == r["output_tok_s"]
    assert r["ttft_transfer_ms"]["max"] == 0.0


def test_a_disaggregated_run_writes_transfers_and_splits_ttft(tmp_path: Path) -> None:
    out = run(tmp_path, "pd", cluster=PD)
    req = pd.read_parquet(out / "requests.parquet")
    for column, _ in CLUSTER_REQUESTS_SCHEMA + PD_REQUESTS_SCHEMA:
        assert column in req.columns
    moved = req[req["output_tokens"] > 1]
    assert set(moved["prefill_replica"]) == {0} and set(moved["replica"]) <= {1, 2}
    # TINY: 512 bytes a prompt position; 0.01 Gbit/s plus 50 us
    assert (moved["kv_bytes"] == moved["prompt_tokens"] * 512).all()
    assert moved["kv_transfer_s"].to_numpy() == pytest.approx(
        moved["kv_bytes"].to_numpy() * 8 / 1e7 + 50e-6)
    for row in _summary(out)["runs"]:
        parts = sum(row[k]["mean"] for k in ("ttft_queue_ms", "ttft_prefill_ms",
                                             "ttft_transfer_ms"))
        assert parts == pytest.approx(row["ttft_ms"]["mean"])  # the split adds up
        assert row["ttft_transfer_ms"]["mean"] >= row["kv_transfer_ms"]["mean"] > 0
        assert row["valid"]  # no mixed call is due where no replica mixes
        assert set(row["replica_utilisation"]) == {"0", "1", "2"}
    steps = pd.read_parquet(out / "steps.parquet")
    assert set(steps[steps["replica"] == 0]["stage"]) == {"PREFILL", "CODA"}


def test_cluster_fields_sweep_like_any_field(tmp_path: Path) -> None:
    out = run(tmp_path, "sweep", arms=["A2"], cluster={"replicas": 1},
              sweep={"cluster.replicas": [1, 3], "cluster.router": ["round_robin",
                                                                   "least_outstanding"]})
    s = _summary(out)
    by_point = {p["point_id"]: p["values"] for p in s["points"]}
    assert len(s["runs"]) == 4
    for row in s["runs"]:
        assert row["num_replicas"] == by_point[row["point_id"]]["cluster.replicas"]
    out = run(tmp_path, "split", arms=["A0"], cluster={"prefill_replicas": 1,
                                                        "decode_replicas": 1},
              variants={"p1q1": {"cluster.decode_replicas": 1},
                        "p1q3": {"cluster.decode_replicas": 3},
                        "p2q2": {"cluster.prefill_replicas": 2, "cluster.decode_replicas": 2}})
    assert [r["num_replicas"] for r in _summary(out)["runs"]] == [2, 4, 4]
    req = pd.read_parquet(out / "requests.parquet")
    assert set(req[req["point_id"] == 2]["prefill_replica"]) == {0, 1}


def test_same_bytes_on_a_rerun_and_from_ray_workers(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    changes = {"arms": ["A0", "A2"], "cluster": PD,
               "sweep": {"cluster.router": ["round_robin", "least_kv"]}}
    a = run(tmp_path, "a", **changes)
    b = run(tmp_path, "b", **changes)
    c = run(tmp_path, "c", "--workers", "2", **changes)
    for name in ("summary.json", "requests.parquet", "steps.parquet", "itl_quantiles.parquet"):
        assert (a / name).read_bytes() == (b / name).read_bytes() == (c / name).read_bytes()


def test_capacity_searches_the_whole_clusters_rate(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, tiny(
        workload=POISSON, repeats=1, arms=["A2"], slo={"ttft_p99_ms": 30.0},
        cluster={"replicas": 2, "router": "least_outstanding"}))
    caps = []
    for replicas in ("1", "2"):
        out = tmp_path / f"cap{replicas}"
        assert main(["capacity", str(path), "--out", str(out), "--no-progress",
                     "--tolerance", "0.2", "--set", f"cluster.replicas={replicas}"]) == 0
        (arm,) = json.loads((out / "capacity.json").read_text())["arms"]
        caps.append(arm["capacity_req_s"])
    assert caps[0] is not None and caps[1] is not None and caps[1] > caps[0] * 1.3


@pytest.mark.parametrize(("cluster", "fragment"), [
    ({"prefill_replicas": 2}, "decode_replicas: give both"),
    ({"router": "least_kv"}, "cluster.replicas: give replicas: N"),
    ({"replicas": 3, "prefill_replicas": 1, "decode_replicas": 1}, "is not prefill_replicas"),
    ({"replicas": 2, "router": "random"}, "cluster.router"),
    ({"replicas": 0}, "cluster.replicas"),
    ({"replicas": 2, "kv_transfer": {"bandwidth_gbps": 0}}, "bandwidth_gbps"),
])
def test_a_bad_cluster_section_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cluster: dict[str, Any], fragment: str,
) -> None:
    path = write_scenario(tmp_path, tiny(cluster=cluster))
    rc = main(["run", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and fragment in err, err
    assert not (tmp_path / "out").exists()


def test_a_real_target_refuses_a_cluster(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = write_scenario(tmp_path, tiny(cluster={"replicas": 2}))
    rc = main(["run", str(path), "--out", str(tmp_path / "out"), "--no-progress",
               "--target", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and "cluster: the cluster section is simulated only" in err, err
    assert not (tmp_path / "out").exists()


def test_a_server_from_a_cluster_scenario_is_one_replica(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from loopserve.server.launch import ServeOptions, _from_scenario

    path = write_scenario(tmp_path, tiny(cluster=PD))
    cfg, _, _ = _from_scenario(ServeOptions(model="tiny", scenario=str(path), arm="A2"))
    assert cfg.scheduler.arm == "mixed" and cfg.scheduler.max_num_seqs == 4
