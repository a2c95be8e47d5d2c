"""The scenario's ``cluster`` section: many simulated engines behind a router, or
prefill/decode disaggregation (docs/cluster.md). Absent, a run is one engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from loopserve.schema.strict import StrictModel

if TYPE_CHECKING:
    from sim.cluster.config import ClusterConfig

MAX_REPLICAS = 256


class KvTransferSpec(StrictModel):
    """The link a prefill replica sends each request's KV (every depth plane) over."""

    bandwidth_gbps: float = Field(
        default=3600.0, gt=0,
        description="gigabits per second per link (.inf: an ideal link); 3600 is one H200's "
                    "NVLink (450 GB/s a direction), 400 one NDR InfiniBand port")
    latency_us: float = Field(default=5.0, ge=0, allow_inf_nan=False,
                              description="fixed cost of every transfer, microseconds")
    links: int = Field(default=1, ge=1, le=MAX_REPLICAS,
                       description="transfers in flight at once; more wait for a free link")
    dtype_bytes: int = Field(default=2, ge=1, le=8, description="bytes per K/V value")


class ClusterSpec(StrictModel):
    """Either ``replicas: N`` (N engines, each with the scenario's scheduler, cache and arm)
    or ``prefill_replicas: P`` with ``decode_replicas: Q`` (disaggregated: a prefill
    replica runs each prompt through all depths atomically, so the arm does not apply to
    it; decode replicas run the arm's decode only). ``router`` picks a replica on arrival
    from what a real router sees (``prefix_affinity``: a hash of the prompt's first
    ``affinity_blocks`` KV blocks); ties go to a draw from the scenario's seed."""

    replicas: int | None = Field(default=None, ge=1, le=MAX_REPLICAS,
                                 description="engines behind the router (GPUs)")
    router: Literal["round_robin", "least_outstanding", "least_kv", "prefix_affinity"] = Field(
        default="round_robin", description="how an arriving request picks its replica")
    prefill_replicas: int | None = Field(default=None, ge=1, le=MAX_REPLICAS,
                                         description="disaggregated: prefill-only replicas")
    decode_replicas: int | None = Field(default=None, ge=1, le=MAX_REPLICAS,
                                        description="disaggregated: decode-only replicas")
    kv_transfer: KvTransferSpec = Field(default_factory=KvTransferSpec,
                                        description="the KV link (disaggregated only)")
    affinity_blocks: int = Field(default=1, ge=1, le=1024,
                                 description="prefix_affinity: leading prompt blocks hashed")

    @model_validator(mode="after")
    def _shape(self) -> ClusterSpec:
        p, q = self.prefill_replicas, self.decode_replicas
        if (p is None) != (q is None):
            raise ValueError("prefill_replicas and decode_replicas: give both (disaggregated) "
                             "or neither")
        if p is None and self.replicas is None:
            raise ValueError("replicas: give replicas: N, or prefill_replicas and "
                             "decode_replicas")
        if p is not None and q is not None and self.replicas is not None \
                and self.replicas != p + q:
            raise ValueError(f"replicas: {self.replicas} is not prefill_replicas + "
                             f"decode_replicas = {p + q}; drop replicas or make it match")
        return self

    def config(self) -> ClusterConfig:
        """The simulator's ``ClusterConfig``."""
        from sim.cluster.config import ClusterConfig, KvTransferConfig  # a cluster run only

        p, q = self.prefill_replicas or 0, self.decode_replicas or 0
        k = self.kv_transfer
        return ClusterConfig(
            num_replicas=p + q if p else (self.replicas or 1), router=self.router,
            num_prefill_replicas=p, num_decode_replicas=q,
            kv_transfer=KvTransferConfig(k.bandwidth_gbps, k.latency_us, k.links,
                                         k.dtype_bytes),
            affinity_blocks=self.affinity_blocks)
