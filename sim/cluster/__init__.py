"""Many simulated engines: replicas behind a router, or prefill and decode replicas joined
by a KV link (docs/cluster.md)."""

from typing import Any

from sim.cluster.config import ROUTERS, ClusterConfig, KvTransferConfig, kv_bytes
from sim.cluster.records import ClusterInfo, RequestInfo, cluster_info

__all__ = ["ROUTERS", "ClusterConfig", "ClusterInfo", "KvTransferConfig", "RequestInfo",
           "cluster_info", "kv_bytes", "simulate_cluster"]


def __getattr__(name: str) -> Any:
    # The driver (and the engine cores it builds) loads only when a cluster is simulated.
    if name == "simulate_cluster":
        from sim.cluster.driver import simulate_cluster

        return simulate_cluster
    raise AttributeError(f"module 'sim.cluster' has no attribute {name!r}")
