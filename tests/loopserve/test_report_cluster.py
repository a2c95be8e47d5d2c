"""The report's cluster section from hand-made summaries: configurations per rate,
disaggregated ones shown once when their arms agree, capacity from the rate sweep, the
headline against the best replicated configuration; no section without a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from loopserve.outputs.rundata import RunData
from loopserve.report.cluster import cluster_runs, configs, headlines

EMPTY = pd.DataFrame()
SLO = {"itl_p99_ms": 10.0, "ttft_p99_ms": 200.0}


def med(point_id: int, arm: str, itl: float, ttft: float, tok: float, pd_run: bool = False,
        valid: bool = True) -> dict[str, Any]:
    row: dict[str, Any] = {
        "arm": arm, "point_id": point_id, "valid": valid, "num_replicas": 4,
        "itl_ms": {"p99": itl}, "ttft_ms": {"p99": ttft}, "output_tok_s": 4 * tok,
        "output_tok_s_per_gpu": tok, "replica_utilisation": {"0": 0.5, "1": 0.7},
        "load_imbalance": 1.1}
    if pd_run:
        row["kv_transfer_ms"] = {"p99": 1.0}
    return row


def run_of(medians: list[dict[str, Any]], points: list[dict[str, Any]]) -> RunData:
    summary = {"points": points, "runs": [], "medians": medians}
    scn = {"arms": ["atomic", "mixed"], "slo": SLO, "workload": {"request_rate": 8.0}}
    return RunData(Path("x"), summary, scn, {}, EMPTY, EMPTY, EMPTY, label="x")  # type: ignore[arg-type]


POINTS = [{"point_id": i, "values": {"variant": v, "workload.request_rate": r}}
          for i, (v, r) in enumerate([("four", 4.0), ("four", 8.0), ("pd", 4.0), ("pd", 8.0)])]


def test_configurations_capacity_and_headline() -> None:
    medians = [
        med(0, "atomic", 5.0, 50.0, 100.0), med(0, "mixed", 4.0, 40.0, 100.0),
        med(1, "atomic", 12.0, 60.0, 200.0), med(1, "mixed", 8.0, 45.0, 200.0),
        med(2, "atomic", 3.0, 60.0, 100.0, True), med(2, "mixed", 3.0, 60.0, 100.0, True),
        med(3, "atomic", 6.0, 300.0, 190.0, True), med(3, "mixed", 6.0, 300.0, 190.0, True),
    ]
    cfgs = configs(run_of(medians, POINTS))
    assert [c.label for c in cfgs] == ["four (atomic)", "four (mixed)", "pd"]  # pd once
    assert [c.capacity(SLO) for c in cfgs] == [4.0, 8.0, 4.0]  # ITL, then TTFT, miss at 8
    lines = headlines(cfgs, SLO)
    assert lines[0] == ("at 4 req/s: pd cuts ITL p99 by 25% against four (mixed) at 1.00x "
                        "output tok/s per GPU; TTFT p99 +50%")
    assert lines[1] == ("at 8 req/s: pd cuts ITL p99 by 25% against four (mixed) at 0.95x "
                        "output tok/s per GPU; TTFT p99 +567%")
    assert lines[2] == ("capacity under the SLO (swept rates): four (atomic) 4 req/s, "
                        "four (mixed) >= 8 req/s, pd 4 req/s")  # 8: the sweep's top


def test_disaggregated_arms_that_differ_are_shown_apart_and_invalid_misses() -> None:
    medians = [med(2, "atomic", 3.0, 60.0, 100.0, True),
               med(2, "mixed", 3.5, 60.0, 100.0, True, valid=False),
               med(3, "atomic", 3.0, 60.0, 100.0, True), med(3, "mixed", 3.0, 60.0, 100.0, True)]
    cfgs = configs(run_of(medians, POINTS))
    assert [c.label for c in cfgs] == ["pd (atomic)", "pd (mixed)"]  # they differ
    assert [c.meets(4.0, SLO) for c in cfgs] == [True, False]
    # 8 req/s meets, but 4 did not: no capacity (every rate up to it must meet)
    assert cfgs[1].meets(8.0, SLO) and cfgs[1].capacity(SLO) is None


def test_no_cluster_no_section() -> None:
    plain = {"arm": "atomic", "point_id": 0, "itl_ms": {"p99": 1.0}}
    assert cluster_runs([run_of([plain], [{"point_id": 0, "values": {}}])]) == []
    (section,) = cluster_runs([run_of([med(0, "atomic", 5.0, 50.0, 100.0)], POINTS)])
    assert [row[0] for row in section["table"].rows] == ["four (atomic)"]
