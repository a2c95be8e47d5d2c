"""Many simulated engines: replicas behind a router, or prefill and decode replicas joined
by a KV link (docs/cluster.md)."""

from sim.cluster.config import ROUTERS, ClusterConfig, KvTransferConfig, kv_bytes
from sim.cluster.driver import simulate_cluster
from sim.cluster.records import ClusterInfo, RequestInfo, cluster_info

__all__ = ["ROUTERS", "ClusterConfig", "ClusterInfo", "KvTransferConfig", "RequestInfo",
           "cluster_info", "kv_bytes", "simulate_cluster"]
