"""How many GPUs a configuration occupies (``--objective capacity_per_gpu``).

A scenario with a ``cluster`` section counts its GPUs there: ``cluster.num_gpus`` when the
section defines it, else ``cluster.replicas`` (prefill plus decode replicas when split);
a scenario without one serves on one GPU.
"""

from __future__ import annotations

from loopserve.schema.scenario import Scenario


def num_gpus(scn: Scenario) -> int:
    """The GPUs the scenario's engine runs on (at least 1)."""
    cluster = getattr(scn, "cluster", None)
    if cluster is None:
        return 1
    for name in ("num_gpus", "replicas"):
        value = getattr(cluster, name, None)
        if isinstance(value, int) and value >= 1:
            return value
    split = [getattr(cluster, n, None) for n in ("prefill_replicas", "decode_replicas")]
    if all(isinstance(v, int) for v in split):
        return max(1, sum(v for v in split if isinstance(v, int)))
    return 1
