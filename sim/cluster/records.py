"""A cluster run's rows: every replica's steps, tokens and requests merged into one
``RunRecords``, with each request's replica and KV transfer, and each replica's busy time
and served tokens."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from engine.core.columns import StepTable, TokenTable
from engine.core.prefix_cache import PrefixCacheStats
from engine.core.records import RunRecords
from engine.core.results import TokenEvent
from engine.core.run_loop import StepLoop


@dataclass(slots=True)
class RequestInfo:
    """Where one request ran: ``replica`` decoded it (the only replica without
    disaggregation), ``prefill_replica`` ran its prompt (-1 without disaggregation).
    ``sampled_s`` is when the prefill replica sampled its first token, ``landed_s`` when its
    KV reached the decode replica (None when it never moved), ``kv_transfer_s`` how long it
    held a link, ``admitted_s`` when the replica its prompt ran on admitted it."""

    arrival_s: float
    replica: int
    prefill_replica: int
    kv_bytes: int = 0
    kv_transfer_s: float = math.nan
    sampled_s: float | None = None
    landed_s: float | None = None
    admitted_s: float | None = None  # admitted where its prompt ran

    @property
    def entry(self) -> int:
        """The replica the router sent it to on arrival (where its prompt ran)."""
        return self.replica if self.prefill_replica < 0 else self.prefill_replica


@dataclass
class ClusterInfo:
    """What a cluster run adds to its ``RunRecords`` (as ``records.cluster``):
    ``step_replica`` gives each step row's replica (rows are replica by replica), ``info``
    each request's placement and transfer; ``replica_roles``, ``replica_busy_s`` and
    ``replica_served_tokens`` (prompt tokens it prefilled plus tokens it emitted) are per
    replica."""

    step_replica: array[int]
    info: dict[str, RequestInfo]
    replica_roles: list[str]
    replica_busy_s: list[float]
    replica_served_tokens: list[int]

    @property
    def disaggregated(self) -> bool:
        return "prefill" in self.replica_roles

    @property
    def num_replicas(self) -> int:
        return len(self.replica_roles)


def merge(replicas: Sequence[tuple[str, StepLoop, float]],
          info: dict[str, RequestInfo]) -> RunRecords:
    """One run's records from each replica's (role, step loop, busy seconds)."""
    parts = []
    for _, loop, _ in replicas:
        assert loop.recorder is not None
        parts.append(loop.recorder.records)
    out = RunRecords()
    if len(parts) == 1:  # one replica: its rows as they are
        one = parts[0]
        out.steps, out.tokens, out.requests = one.steps, one.tokens, one.requests
        out.batches, out.prefix_cache = one.batches, one.prefix_cache
        out.invalid_reasons = list(one.invalid_reasons)
        step_replica = array("i", [0]) * len(one.steps)
    else:
        steps, step_replica = StepTable(), array("i")
        tokens: list[TokenEvent] = []
        for r, ((role, _, _), rec) in enumerate(zip(replicas, parts, strict=True)):
            steps.extend(rec.steps)
            step_replica.extend([r] * len(rec.steps))
            for event in rec.tokens:
                landed = info[event.request_id].landed_s if role == "prefill" else None
                tokens.append(event if landed is None else TokenEvent(
                    event.request_id, event.index, landed, event.token_id, event.exit_depth,
                    False, None))
            out.requests.extend(
                q for q in rec.requests
                if role != "prefill" or info[q.request_id].landed_s is None)
            out.batches.extend(rec.batches)
            out.invalid_reasons.extend(rec.invalid_reasons)
        tokens.sort(key=lambda e: e.time_s)
        out.requests.sort(key=lambda q: q.finish_s if q.finish_s is not None else math.inf)
        out.steps, out.tokens = steps, TokenTable.of(tokens)
        out.prefix_cache = _sum_stats([p.prefix_cache for p in parts])
    served = [len(p.tokens) for p in parts]
    for r, p in enumerate(parts):
        for q in p.requests:
            where = info[q.request_id]
            if where.entry == r:
                served[r] += q.prompt_tokens
                where.admitted_s = q.admitted_s
    out.cluster = ClusterInfo(step_replica, info, [role for role, _, _ in replicas],
                              [busy for _, _, busy in replicas], served)
    return out


def _sum_stats(stats: Sequence[PrefixCacheStats | None]) -> PrefixCacheStats | None:
    have = [s for s in stats if s is not None]
    if not have:
        return None
    return PrefixCacheStats(sum(s.num_requests for s in have),
                            sum(s.queried_tokens for s in have),
                            sum(s.hit_tokens for s in have),
                            sum(s.evicted_blocks for s in have))
