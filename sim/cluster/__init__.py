"""Many simulated engines: replicas behind a router, or prefill and decode replicas joined
by a KV link (docs/cluster.md)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.core.records import RunRecords
    from sim.cluster.config import ROUTERS, ClusterConfig, KvTransferConfig, kv_bytes
    from sim.cluster.driver import simulate_cluster
    from sim.cluster.records import ClusterInfo, RequestInfo

# Each name loads with its module on first use (``__getattr__``): a one-engine run asks
# ``cluster_info`` of its records and loads nothing else of the cluster.
_LAZY: dict[str, str] = {
    "ROUTERS": "sim.cluster.config",
    "ClusterConfig": "sim.cluster.config",
    "KvTransferConfig": "sim.cluster.config",
    "kv_bytes": "sim.cluster.config",
    "ClusterInfo": "sim.cluster.records",
    "RequestInfo": "sim.cluster.records",
    "simulate_cluster": "sim.cluster.driver",
}

__all__ = ["ROUTERS", "ClusterConfig", "ClusterInfo", "KvTransferConfig", "RequestInfo",
           "cluster_info", "kv_bytes", "simulate_cluster"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sim.cluster' has no attribute {name!r}")


def cluster_info(records: RunRecords) -> ClusterInfo | None:
    """A run's cluster part (``records.cluster``, ``sim.cluster.records.ClusterInfo``), or
    None for one engine."""
    c = records.cluster
    if c is None:
        return None
    from sim.cluster.records import ClusterInfo

    return c if isinstance(c, ClusterInfo) else None
