"""The cluster row of ``make bench``: N replicas behind a round-robin router at N times the
rate (and N times the requests) of one replica, so each replica carries the single engine's
load; the cost per core call of the cluster over that of one replica must stay within N
(the cluster's SimPy bookkeeping is per step, the core's work per core call is the same)."""

from __future__ import annotations

import statistics
from typing import Any

from engine.core import CacheConfig, EngineConfig, SchedulerConfig
from engine.core.shapes import MODEL_SHAPES
from loopserve.workloads import build_source
from sim import make_cost_model, simulate
from sim.cluster import ClusterConfig, simulate_cluster


def cluster_row(arm: str, workload: dict[str, Any], num_replicas: int, repeats: int, seed: int,
                scheduler: dict[str, Any], num_blocks: int, model: str) -> dict[str, Any]:
    """Median microseconds per core call of one replica and of ``num_replicas``, and their
    ratio (``within_budget``: at most ``num_replicas``)."""
    shape = MODEL_SHAPES[model]
    cfg = EngineConfig(shape, SchedulerConfig(arm=arm, **scheduler),
                       CacheConfig(num_blocks=num_blocks))
    cost = make_cost_model("roofline", shape, hardware="h200")
    many = {**workload, "num_requests": workload["num_requests"] * num_replicas,
            "request_rate": workload["request_rate"] * num_replicas}
    one_src = build_source(workload, seed=seed, vocab_size=shape.vocab_size)
    many_src = build_source(many, seed=seed, vocab_size=shape.vocab_size)
    cluster = ClusterConfig(num_replicas=num_replicas)
    one_us, many_us, calls = [], [], (0, 0)
    for _ in range(repeats):
        rec = simulate(cfg, one_src, cost, seed=seed, vocab_size=shape.vocab_size)
        one_us.append(1e6 * rec.wall_s / rec.num_core_calls)
        crec = simulate_cluster(cfg, cluster, many_src, cost, seed=seed,
                                vocab_size=shape.vocab_size)
        many_us.append(1e6 * crec.wall_s / crec.num_core_calls)
        calls = (rec.num_core_calls, crec.num_core_calls)
    ratio = statistics.median(many_us) / statistics.median(one_us)
    return {
        "arm": arm, "num_replicas": num_replicas, "router": "round_robin",
        "num_core_calls": {"one": calls[0], "cluster": calls[1]},
        "us_per_core_call": {"one": one_us, "cluster": many_us},
        "median_us_per_core_call": {"one": statistics.median(one_us),
                                    "cluster": statistics.median(many_us)},
        "ratio": ratio, "within_budget": ratio <= num_replicas,
    }
