"""Many simulated engines: replicas behind a router, or prefill and decode replicas joined
by a KV link (docs/cluster.md)."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.cluster.config import ROUTERS, ClusterConfig, KvTransferConfig, kv_bytes
    from sim.cluster.driver import simulate_cluster
    from sim.cluster.records import ClusterInfo, RequestInfo, cluster_info

# Each name loads with its module on first use (``__getattr__``): a one-engine run reads
# ``cluster_info`` of its records and never loads the cluster's config or driver.
_LAZY: dict[str, str] = {
    "ROUTERS": "sim.cluster.config",
    "ClusterConfig": "sim.cluster.config",
    "KvTransferConfig": "sim.cluster.config",
    "kv_bytes": "sim.cluster.config",
    "ClusterInfo": "sim.cluster.records",
    "RequestInfo": "sim.cluster.records",
    "cluster_info": "sim.cluster.records",
    "simulate_cluster": "sim.cluster.driver",
}

__all__ = ["ROUTERS", "ClusterConfig", "ClusterInfo", "KvTransferConfig", "RequestInfo",
           "cluster_info", "kv_bytes", "simulate_cluster"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sim.cluster' has no attribute {name!r}")
