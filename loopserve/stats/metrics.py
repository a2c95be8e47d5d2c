"""Run metrics with vLLM's definitions (docs/design.md) and the raw-row tables.

- TTFT = first_token_s - arrival_s, per request that produced a token;
- TPOT = (finish_s - first_token_s) / (output_tokens - 1), per request with > 1 token;
- ITL = every gap between consecutive tokens of a request, pooled over requests;
- E2EL = finish_s - arrival_s, per finished request;
- percentiles by numpy's default linear interpolation, reported in milliseconds as
  ``{mean, p50, p90, p99, max}`` (all None when a metric has no sample);
- output_tok_s = output tokens / (last finish - first arrival);
- num_readbacks: device-to-host readbacks over all steps (the steps table's column: what a
  runner did, RFC §4's count in simulation; ``scheduler.readback_skip`` off adds one per
  decode loop under a signal mode);
- prompt_token_loops_s = prompt tokens x D / the same span (prompt work done, in token-loops;
  with prefix caching it counts cached tokens too, as prompt work served);
- with ``cache.enable_prefix_caching`` only (so other runs' rows stay as they were): vLLM's
  prefix-cache terms, prompt tokens queried at admission and hit (served from the cache),
  their ratio, and the physical blocks (over all planes) evicted to make room;
- with a ``cluster`` section only: per-replica and per-GPU terms and the TTFT split
  (``loopserve.stats.cluster_metrics``).

Only finished requests (the rows of ``RunRecords.requests``) count. The decode population's
own ITL/TPOT and the prompt-progress metrics of RFC §6 come from ``loopserve.stats.population``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from engine.core.records import RunRecords
from engine.core.results import TokenEvent
from loopserve.stats import Distribution, distribution_ms
from loopserve.stats.population import population_metrics, previous_rows, view
from sim.cluster import cluster_info

if TYPE_CHECKING:
    from loopserve.targets import RunSpec

STEP_COLUMNS: tuple[str, ...] = (
    "step", "start_s", "end_s", "stage", "core_calls", "num_decode_items", "num_prompt_items",
    "num_prompt_tokens", "num_fused_prelude_items", "depths", "mixed",
    "max_prompt_items_per_request",
)
REQUEST_COLUMNS: tuple[str, ...] = (
    "request_id", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s", "finish_s",
    "injected", "finish_reason",
)
TOKEN_COLUMNS: tuple[str, ...] = ("request_id", "index", "time_s", "token_id", "exit_depth")


class Metrics(TypedDict):
    """The metrics of one run, as summary.json carries them (keys in this order)."""

    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2el_ms: Distribution
    output_tok_s: float | None
    prompt_token_loops_s: float | None
    num_requests: int
    num_core_calls: int
    num_mixed_core_calls: int
    num_readbacks: int
    prompt_depths_per_step: dict[str, float | None]
    prompt_token_loops_per_decode_gap: dict[str, float | None]
    decode_itl_ms: NotRequired[Distribution]
    decode_tpot_ms: NotRequired[Distribution]
    injected_itl_ms: NotRequired[Distribution]
    injected_tpot_ms: NotRequired[Distribution]
    prefix_cache_queried_tokens: NotRequired[int]
    prefix_cache_hit_tokens: NotRequired[int]
    prefix_cache_hit_rate: NotRequired[float | None]
    prefix_cache_evicted_blocks: NotRequired[int]
    # a simulated cluster only (loopserve.stats.cluster_metrics)
    num_replicas: NotRequired[int]
    output_tok_s_per_gpu: NotRequired[float | None]
    replica_utilisation: NotRequired[dict[str, float | None]]
    load_imbalance: NotRequired[float | None]
    ttft_queue_ms: NotRequired[Distribution]
    ttft_prefill_ms: NotRequired[Distribution]
    ttft_transfer_ms: NotRequired[Distribution]
    kv_transfer_ms: NotRequired[Distribution]


@dataclass
class RunResult:
    """A finished run: raw records, validity reasons and its metrics summary."""

    spec: RunSpec
    records: RunRecords
    invalid_reasons: list[str]
    metrics: Metrics
    # the run's inter-token gaps (s), as ``inter_token_latencies(records)``, when kept
    itl_s: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons


def consecutive_tokens(records: RunRecords) -> list[tuple[TokenEvent, TokenEvent]]:
    """Every (token, next token) pair of the same request, pooled in the order the second
    token came; ValueError when a request's tokens are out of order."""
    toks = records.tokens
    return [(toks.row(j), toks.row(k)) for k, j in enumerate(toks.previous()) if j >= 0]


def inter_token_latencies(records: RunRecords, prev: np.ndarray | None = None) -> np.ndarray:
    """Every gap (s) between consecutive tokens of the same request, pooled in the order the
    later token came (``TokenTable.gaps``, vectorised over the columns); ValueError when a
    request's tokens are out of order. ``prev``: ``previous_rows(records.tokens)`` when the
    caller has it."""
    if prev is None:
        prev = previous_rows(records.tokens)
    later = np.flatnonzero(prev >= 0)
    time_s = view(records.tokens.time_s)
    return time_s[later] - time_s[prev[later]]


def _num_depths(records: RunRecords) -> int | None:
    toks = records.tokens
    for k, index in enumerate(toks.index):
        if index == 0:
            return int(toks.exit_depth[k])  # the first token always runs all D depths
    return None


def summarize(records: RunRecords, num_depths: int | None = None) -> Metrics:
    """Metrics of one run. ``num_depths`` (D) scales prompt token-loops; when None it is read
    from the records (a first token always runs all D loops)."""
    return summarize_with_gaps(records, num_depths)[0]


def summarize_with_gaps(records: RunRecords,
                        num_depths: int | None = None) -> tuple[Metrics, np.ndarray]:
    """``summarize``, and the inter-token gaps its ITL is taken from
    (``inter_token_latencies``)."""
    reqs = records.requests
    ttft = [r.first_token_s - r.arrival_s for r in reqs if r.first_token_s is not None]
    tpot = [
        (r.finish_s - r.first_token_s) / (r.output_tokens - 1)
        for r in reqs
        if r.output_tokens > 1 and r.first_token_s is not None and r.finish_s is not None
    ]
    e2el = [r.finish_s - r.arrival_s for r in reqs if r.finish_s is not None]
    finishes = [r.finish_s for r in reqs if r.finish_s is not None]
    span = max(finishes) - min(r.arrival_s for r in reqs) if finishes else 0.0
    depths = num_depths if num_depths is not None else _num_depths(records)
    prev = previous_rows(records.tokens)
    itl_s = inter_token_latencies(records, prev)
    out_tok_s: float | None = None
    loops_s: float | None = None
    if span > 0:
        out_tok_s = sum(r.output_tokens for r in reqs) / span
        if depths is not None:
            loops_s = sum(r.prompt_tokens for r in reqs) * depths / span
    out: Metrics = {
        "ttft_ms": distribution_ms(ttft),
        "tpot_ms": distribution_ms(tpot),
        "itl_ms": distribution_ms(itl_s),
        "e2el_ms": distribution_ms(e2el),
        "output_tok_s": out_tok_s,
        "prompt_token_loops_s": loops_s,
        "num_requests": len(reqs),
        "num_core_calls": records.num_core_calls,
        "num_mixed_core_calls": records.num_mixed_core_calls,
        "num_readbacks": int(sum(records.steps.num_readbacks)),
        **population_metrics(records, prev),  # type: ignore[typeddict-item]
    }
    pc = records.prefix_cache
    if pc is not None:
        out["prefix_cache_queried_tokens"] = pc.queried_tokens
        out["prefix_cache_hit_tokens"] = pc.hit_tokens
        out["prefix_cache_hit_rate"] = pc.hit_rate if pc.queried_tokens else None
        out["prefix_cache_evicted_blocks"] = pc.evicted_blocks
    info = cluster_info(records)
    if info is not None:
        from loopserve.stats.cluster_metrics import cluster_metrics

        out.update(cluster_metrics(records, info, out_tok_s, distribution_ms))  # type: ignore[typeddict-item]
    return out, itl_s


def metric(row: Mapping[str, object] | None, key: str, sub: str | None = None) -> float | None:
    """One metric of a summary row (or of a run's ``Metrics``), or None."""
    if row is None:
        return None
    value = row.get(key)
    if sub is not None:
        value = value.get(sub) if isinstance(value, dict) else None
    return float(value) if isinstance(value, int | float) else None


def _frame(rows: Iterable[Any], columns: tuple[str, ...]) -> pd.DataFrame:
    get = attrgetter(*columns)
    return pd.DataFrame.from_records([get(r) for r in rows], columns=list(columns))


def steps_frame(records: RunRecords) -> pd.DataFrame:
    """steps.csv rows (docs/design.md) without the arm/point_id/repeat columns."""
    t = records.steps
    words = np.array(t.strings.values + [""], dtype=object)
    cols: dict[str, Any] = {name: np.array(getattr(t, name), dtype=np.int64)
                            for name in STEP_COLUMNS}
    for name in ("start_s", "end_s"):
        cols[name] = np.array(getattr(t, name), dtype=np.float64)
    for name in ("stage", "depths"):
        cols[name] = words[np.array(getattr(t, name), dtype=np.int64)].astype(str)
    cols["mixed"] = np.array(t.mixed, dtype=bool)
    return pd.DataFrame({name: cols[name] for name in STEP_COLUMNS})


def requests_frame(records: RunRecords) -> pd.DataFrame:
    """requests.csv rows in finish order, without the arm/point_id/repeat columns."""
    return _frame(records.requests, REQUEST_COLUMNS)


def tokens_frame(records: RunRecords) -> pd.DataFrame:
    """tokens.csv rows in emission order, without the arm/point_id/repeat columns."""
    t = records.tokens
    ids = np.array(t.request_ids.values + [""], dtype=object)
    return pd.DataFrame({
        "request_id": ids[np.array(t.request, dtype=np.int64)].astype(str),
        "index": np.array(t.index, dtype=np.int64),
        "time_s": np.array(t.time_s, dtype=np.float64),
        "token_id": np.array(t.token_id, dtype=np.int64),
        "exit_depth": np.array(t.exit_depth, dtype=np.int64),
    })
