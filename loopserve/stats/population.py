"""RFC §6 metrics of the decode population and of prompt progress, per run.

- ``decode_itl_ms`` / ``decode_tpot_ms``: ITL and TPOT of the decode population (the
  requests that are not injected), and ``injected_itl_ms`` / ``injected_tpot_ms`` of the
  injected prompts' own decode; only for workloads that inject (``interference``), where the
  RFC's "decode ITL" is the population's and the headline and SLO read it;
- ``prompt_depths_per_step``: ``{mean, p50, max}`` over the steps that run prompt work in the
  loop, of the prompt item-depths each runs (an atomic chunk over D depths counts D, a
  per-depth or mixed prompt item 1, two chunks twice);
- ``prompt_token_loops_per_decode_gap``: ``{p50, p99}`` over every gap between two
  consecutive tokens of a decode-population request (all requests when none is injected),
  of the prompt token-loops of the steps that ended within the gap (after the earlier
  token, up to and including the later one). A step's prompt token-loops are its prompt
  tokens x its prompt item-depths / its prompt items, exact when its prompt items run the
  same number of depths (every step but a mixed ``prompt_shortcut`` one).

The token columns are read as numpy arrays (``view``), each token's previous token of its
request found once per run (``previous_rows``, ``TokenTable.previous`` vectorised).
Percentiles are numpy's default linear interpolation; only finished requests count, as in
``loopserve.stats.metrics``.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np

from engine.core.columns import TokenTable
from engine.core.records import RunRecords
from loopserve.stats import distribution_ms


def view(column: array[Any]) -> np.ndarray:
    """A record column as numpy without a copy, in its own width (int8 .. int64, float64)."""
    dtype = np.dtype(column.typecode)
    return np.frombuffer(column, dtype=dtype) if len(column) else np.empty(0, dtype)


def previous_rows(tokens: TokenTable) -> np.ndarray:
    """Per row, the row of the same request's previous token (-1 for its first), as
    ``TokenTable.previous``; ValueError (from it, naming the request) when a request's tokens
    are out of order."""
    request, index = view(tokens.request), view(tokens.index).astype(np.int64)
    rows = np.argsort(request, kind="stable")  # each request's rows, in row order
    same = request[rows[1:]] == request[rows[:-1]]
    later, earlier = rows[1:][same], rows[:-1][same]
    if not np.array_equal(index[later], index[earlier] + 1):
        tokens.previous()  # raises, naming the first request out of order
    prev = np.full(len(request), -1, dtype=np.int64)
    prev[later] = earlier
    return prev


def itl_key(row: Mapping[str, Any]) -> str:
    """The ITL a headline and an SLO read from a summary row: the decode population's when
    the run injected prompts, else every request's."""
    return "decode_itl_ms" if isinstance(row.get("decode_itl_ms"), dict) else "itl_ms"


class DepthsPerStep(TypedDict):
    mean: float | None
    p50: float | None
    max: float | None


class PerGap(TypedDict):
    p50: float | None
    p99: float | None


def _prompt_depths(records: RunRecords) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step: its end time, prompt item-depths and prompt token-loops (0 without prompt
    items)."""
    t = records.steps
    n_prompt = view(t.num_prompt_items).astype(np.int64)
    codes = view(t.depths).astype(np.int64)
    work = n_prompt != 0
    totals = np.zeros(len(t.strings.values), dtype=np.int64)
    for code in np.unique(codes[work]).tolist():  # "depth:items;..." -> total item-depths
        text = t.strings.values[code]
        totals[code] = sum(int(p.partition(":")[2]) for p in text.split(";") if p)
    # a decode item runs one depth of its step
    d = (totals[codes] - view(t.num_decode_items))[work]
    depths = np.zeros(len(codes), dtype=np.float64)
    loops = np.zeros(len(codes), dtype=np.float64)
    depths[work] = d
    # int products, then one correctly rounded division: Python's int / int
    loops[work] = (view(t.num_prompt_tokens)[work] * d).astype(np.float64) / n_prompt[work]
    return view(t.end_s).astype(np.float64), depths, loops


def _gaps_s(records: RunRecords, keep: set[str],
            prev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end times of every gap between consecutive tokens of a ``keep`` request;
    ``prev``: ``previous_rows(records.tokens)``."""
    toks = records.tokens
    kept = np.fromiter((rid in keep for rid in toks.request_ids.values), dtype=bool,
                       count=len(toks.request_ids.values))
    rows = np.flatnonzero((prev >= 0) & kept[view(toks.request)])
    time_s = view(toks.time_s)
    return time_s[prev[rows]], time_s[rows]


def _itl_tpot(records: RunRecords, keep: set[str], prev: np.ndarray) -> tuple[Any, Any]:
    starts, ends = _gaps_s(records, keep, prev)
    tpot = [(r.finish_s - r.first_token_s) / (r.output_tokens - 1) for r in records.requests
            if r.request_id in keep and r.output_tokens > 1 and r.first_token_s is not None
            and r.finish_s is not None]
    return distribution_ms(ends - starts), distribution_ms(tpot)


def population_metrics(records: RunRecords, prev: np.ndarray | None = None) -> dict[str, Any]:
    """The metrics above, keyed as summary.json carries them; ``prev``:
    ``previous_rows(records.tokens)`` when the caller has it."""
    if prev is None:
        prev = previous_rows(records.tokens)
    reqs = records.requests
    injected = {r.request_id for r in reqs if r.injected}
    population = {r.request_id for r in reqs if not r.injected}
    out: dict[str, Any] = {}
    if injected:
        out["decode_itl_ms"], out["decode_tpot_ms"] = _itl_tpot(records, population, prev)
        out["injected_itl_ms"], out["injected_tpot_ms"] = _itl_tpot(records, injected, prev)
    end_s, depths, loops = _prompt_depths(records)
    work = depths[depths > 0]
    out["prompt_depths_per_step"] = DepthsPerStep(
        mean=float(work.mean()) if work.size else None,
        p50=float(np.percentile(work, 50)) if work.size else None,
        max=float(work.max()) if work.size else None)
    starts, ends = _gaps_s(records, population or injected, prev)
    per_gap: PerGap = {"p50": None, "p99": None}
    if ends.size:
        order = np.argsort(end_s, kind="stable")
        cum = np.concatenate(([0.0], np.cumsum(loops[order])))
        sorted_end = end_s[order]
        hi = np.searchsorted(sorted_end, ends, side="right")
        lo = np.searchsorted(sorted_end, starts, side="right")
        work_per_gap = cum[hi] - cum[lo]
        p50, p99 = np.percentile(work_per_gap, [50, 99])
        per_gap = {"p50": float(p50), "p99": float(p99)}
    out["prompt_token_loops_per_decode_gap"] = per_gap
    return out
