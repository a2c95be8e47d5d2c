"""``make bench`` end to end on a small load: the files it writes and what they hold (no
speed is asserted here; speed targets live in the benchmark's own output)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tools import bench


def test_bench_writes_rates_for_every_arm_and_the_pure_comparison(tmp_path: Path) -> None:
    assert bench.main(["--num-requests", "12", "--repeats", "1", "--out", str(tmp_path),
                       "--host-steps", "5", "--host-repeats", "1", "--host-contexts", "20"]) == 0
    (run,) = tmp_path.iterdir()
    result = json.loads((run / "bench.json").read_text())
    env = json.loads((run / "env.json").read_text())
    assert [a["arm"] for a in result["arms"]] == ["atomic", "per_depth", "mixed", "wavefront"]
    for a in result["arms"]:
        assert a["num_requests"] == 12 and a["num_core_calls"] > 0
        assert a["median_core_calls_s"] > 0 and a["pure_median_core_calls_s"] > 0
        assert a["native_speedup"] == a["median_core_calls_s"] / a["pure_median_core_calls_s"]
    assert result["min_ratio_to_simpy_loop"] == min(a["ratio_to_simpy_loop"]
                                                    for a in result["arms"])
    assert result["target_ratio_to_simpy_loop"] == bench.TARGET_RATIO_TO_SIMPY_LOOP
    # under `make test` the native build is in use and the pure runs really ran without it
    assert result["native"] is env["native"]["active"] is (
        os.environ.get("LOOPSERVE_EXPECT_NATIVE") == "1" or result["native"])
    assert {"python", "simpy", "git", "native"} <= env.keys()
    c = result["cluster"]  # 4 replicas at 4x the requests: 4x the core calls or so
    assert c["num_replicas"] == 4 and c["ratio"] > 0
    assert c["num_core_calls"]["cluster"] > 2 * c["num_core_calls"]["one"] > 0
    assert c["within_budget"] is (c["ratio"] <= 4)
    host = result["host_overhead"]
    assert [h["rows"] for h in host] == [1, 8, 16, 64]
    for h in host:
        assert h["steps"] == 5 and h["context"] == 20
        assert h["total_us"] == h["schedule_us"] + h["metadata_us"] + h["triton_us"] > 0


def test_bench_with_prefix_caching_on_shared_prefixes(tmp_path: Path) -> None:
    assert bench.main(["--num-requests", "12", "--repeats", "1", "--pure-repeats", "0",
                       "--arms", "mixed", "--prefix-caching", "on", "--shared-prefix", "64",
                       "--host-steps", "0",
                       "--out", str(tmp_path)]) == 0
    (run,) = tmp_path.iterdir()
    result = json.loads((run / "bench.json").read_text())
    assert result["prefix_caching"] is True
    assert result["workload"]["shared_prefix"] == {"tokens": 64, "num_prefixes": 8}
    (a,) = result["arms"]
    assert a["median_us_per_core_call"] == 1e6 / a["median_core_calls_s"]


def test_bench_refuses_an_unknown_arm_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as e:
        bench.main(["--arms", "mixd", "--out", str(tmp_path)])
    assert e.value.code == 2 and not any(tmp_path.iterdir())
