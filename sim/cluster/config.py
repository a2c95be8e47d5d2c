"""A simulated cluster's shape: replicas behind a router, or prefill and decode replicas
joined by a KV link (``docs/cluster.md``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from engine.core.config import ModelShape

RouterKind = Literal["round_robin", "least_outstanding", "least_kv", "prefix_affinity"]
ROUTERS: tuple[str, ...] = ("round_robin", "least_outstanding", "least_kv", "prefix_affinity")


@dataclass(frozen=True, slots=True)
class KvTransferConfig:
    """The link a prefill replica sends a request's KV over: ``links`` parallel links of
    ``bandwidth_gbps`` (gigabits per second, ``math.inf`` for an ideal link) each, every
    transfer paying ``latency_us`` once; a transfer holds one link for its whole duration."""

    bandwidth_gbps: float = 3600.0
    latency_us: float = 5.0
    links: int = 1
    dtype_bytes: int = 2

    def __post_init__(self) -> None:
        if not self.bandwidth_gbps > 0:
            raise ValueError(f"cluster.kv_transfer.bandwidth_gbps: must be > 0, got "
                             f"{self.bandwidth_gbps!r}")
        if not (self.latency_us >= 0 and math.isfinite(self.latency_us)):
            raise ValueError(f"cluster.kv_transfer.latency_us: must be >= 0, got "
                             f"{self.latency_us!r}")
        if self.links < 1 or self.dtype_bytes < 1:
            raise ValueError("cluster.kv_transfer: links and dtype_bytes must be >= 1")

    def transfer_s(self, num_bytes: int) -> float:
        """Seconds one transfer of ``num_bytes`` holds a link: latency plus bytes over the
        bandwidth."""
        wire = 0.0 if math.isinf(self.bandwidth_gbps) else num_bytes * 8 / (
            self.bandwidth_gbps * 1e9)
        return self.latency_us * 1e-6 + wire


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """``num_replicas`` engines behind ``router``; with ``num_prefill_replicas`` and
    ``num_decode_replicas`` (both > 0) the cluster is disaggregated: replicas 0..P-1 prefill,
    P..P+Q-1 decode, and ``num_replicas`` is P + Q."""

    num_replicas: int = 1
    router: RouterKind = "round_robin"
    num_prefill_replicas: int = 0
    num_decode_replicas: int = 0
    kv_transfer: KvTransferConfig = field(default_factory=KvTransferConfig)
    affinity_blocks: int = 1  # prefix_affinity: leading prompt blocks keyed on

    def __post_init__(self) -> None:
        if self.router not in ROUTERS:
            raise ValueError(f"cluster.router: unknown router {self.router!r}; use one of "
                             f"{'|'.join(ROUTERS)}")
        pd = (self.num_prefill_replicas, self.num_decode_replicas)
        if any(pd) and not all(pd):
            raise ValueError("cluster: disaggregation needs both prefill_replicas and "
                             "decode_replicas >= 1")
        if all(pd) and self.num_replicas != sum(pd):
            raise ValueError(f"cluster.replicas: {self.num_replicas} is not prefill_replicas "
                             f"+ decode_replicas = {sum(pd)}; give one or the other")
        if self.num_replicas < 1 or self.affinity_blocks < 1:
            raise ValueError("cluster.replicas and cluster.affinity_blocks must be >= 1")

    @property
    def disaggregated(self) -> bool:
        return self.num_prefill_replicas > 0

    def role(self, replica: int) -> str:
        """``prefill``, ``decode`` or ``mixed`` (a replica that serves both)."""
        if not self.disaggregated:
            return "mixed"
        return "prefill" if replica < self.num_prefill_replicas else "decode"


def kv_bytes(shape: ModelShape, num_planes: int, num_positions: int, dtype_bytes: int) -> int:
    """Bytes of a request's K and V over ``num_positions`` positions: positions x layers x
    depth planes x 2 (K, V) x KV heads x head dim x bytes per value."""
    return (num_positions * shape.num_layers * num_planes * 2 * shape.num_kv_heads
            * shape.head_dim * dtype_bytes)
