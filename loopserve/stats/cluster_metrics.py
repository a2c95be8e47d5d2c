"""A simulated cluster's metrics beside a run's totals (docs/cluster.md):

- ``num_replicas`` (one GPU each) and ``output_tok_s_per_gpu`` = output_tok_s / replicas, so
  configurations of the same GPU count compare honestly;
- ``replica_utilisation``: per replica, its busy time (steps running) over the run's span
  (first arrival to last finish, as output_tok_s);
- ``load_imbalance``: max / mean of the replicas' served tokens (prompt tokens prefilled
  plus tokens emitted), within each role (prefill, decode) and the larger of the two; 1 is
  perfect balance;
- TTFT split per request: ``ttft_queue_ms`` (arrival to admission where its prompt ran),
  ``ttft_prefill_ms`` (admission to its first token's sampling), ``ttft_transfer_ms``
  (sampling to the KV landing on the decode replica: waiting for its blocks, for a link,
  and the transfer; 0 without disaggregation); they sum to TTFT;
- disaggregated only: ``kv_transfer_ms``, the time each transfer held a link.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from engine.core.records import RunRecords
from sim.cluster.records import ClusterInfo


def cluster_metrics(records: RunRecords, info: ClusterInfo, output_tok_s: float | None,
                    distribution_ms: Callable[[Iterable[float]], Any]) -> dict[str, Any]:
    """The cluster keys of one run's summary row; ``distribution_ms`` summarises a sample
    (``loopserve.stats.metrics``'s, which calls this)."""
    reqs = records.requests
    finishes = [r.finish_s for r in reqs if r.finish_s is not None]
    span = max(finishes) - min(r.arrival_s for r in reqs) if finishes else 0.0
    n = len(info.replica_roles)
    queue, prefill, transfer, link = [], [], [], []
    for r in reqs:
        where = info.info[r.request_id]
        if r.first_token_s is None or where.admitted_s is None:
            continue
        sampled = where.sampled_s if where.landed_s is not None else r.first_token_s
        assert sampled is not None
        queue.append(where.admitted_s - r.arrival_s)
        prefill.append(sampled - where.admitted_s)
        transfer.append(r.first_token_s - sampled)
        if where.landed_s is not None:
            link.append(where.kv_transfer_s)
    out: dict[str, Any] = {
        "num_replicas": n,
        "output_tok_s_per_gpu": None if output_tok_s is None else output_tok_s / n,
        "replica_utilisation": {str(i): (busy / span if span > 0 else None)
                                for i, busy in enumerate(info.replica_busy_s)},
        "load_imbalance": _imbalance(info),
        "ttft_queue_ms": distribution_ms(queue),
        "ttft_prefill_ms": distribution_ms(prefill),
        "ttft_transfer_ms": distribution_ms(transfer),
    }
    if "prefill" in info.replica_roles:
        out["kv_transfer_ms"] = distribution_ms(link)
    return out


def _imbalance(info: ClusterInfo) -> float | None:
    worst: float | None = None
    for role in sorted(set(info.replica_roles)):
        served = [s for s, r in zip(info.replica_served_tokens, info.replica_roles,
                                    strict=True) if r == role]
        mean = sum(served) / len(served)
        if mean > 0:
            worst = max(worst or 0.0, max(served) / mean)
    return worst
