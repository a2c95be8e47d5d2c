"""vLLM's benchmark result keys: the one writer, for the HTTP client and for run records.

A result is one flat dict with ``vllm bench serve``'s keys and definitions (vLLM's
``benchmarks/serve.py``): ``duration``, ``completed``, ``failed``, ``total_input_tokens``,
``total_output_tokens``, ``request_throughput`` (completed / duration), ``request_goodput``
(good requests / duration, None without SLOs), ``output_throughput``,
``total_token_throughput``, ``max_output_tokens_per_s`` (the most tokens in any one-second
bucket from the first request's start), ``max_concurrent_requests`` (the most requests active
in any such bucket), the per-request lists ``input_lens``, ``output_lens``, ``ttfts``,
``itls``, ``generated_texts``, ``errors``, and per metric M of ``percentile_metrics``
``mean_M_ms``, ``median_M_ms``, ``std_M_ms`` and ``pP_M_ms`` per P of ``percentiles``.

Per successful request: TTFT = first content chunk - start; TPOT = (latency - TTFT) /
(output tokens - 1), only with more than one token; ITL = each gap between consecutive
content chunks, pooled; E2EL = latency (start to the last content chunk). Statistics are
numpy's (linear percentiles, population std), 0 for an empty sample, as vLLM's. A request is
good (DistServe's goodput) when every SLO given holds: ``value <= slo``, with TPOT counted as
0 for a one-token request.

``vllm_results.json`` (``vllm_run_results``) holds every run's result beside summary.json: each
entry is ``{arm, target, point_id, repeat, valid}`` then these keys, by default with every
metric at percentiles 50, 90 and 99 (``ResultOptions``: ``loopserve run
--percentile-metrics/--metric-percentiles`` choose, as vLLM's flags do), without the
per-request lists (as ``vllm bench serve`` without ``--save-detailed``). Its ``duration`` runs
from the first arrival to the last finish (the span summary.json's output tok/s uses). Goodput
takes ``--goodput ttft:MS tpot:MS e2el:MS``, else the scenario's ``slo`` (``slo_goodput``:
``slo.ttft_p99_ms`` bounds each request's TTFT, ``slo.itl_p99_ms`` its TPOT); with neither,
``request_goodput`` is null.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.core.records import RunRecords

if TYPE_CHECKING:
    from loopserve.schema.scenario import SloSpec
    from loopserve.stats.metrics import RunResult

METRICS = ("ttft", "tpot", "itl", "e2el")
DEFAULT_METRICS = ("ttft", "tpot", "itl")
DEFAULT_PERCENTILES = (99.0,)
RUN_PERCENTILES = (50.0, 90.0, 99.0)  # vllm_results.json's default
DETAILED_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")


@dataclass
class RequestOutcome:
    """One request as the metrics read it (vLLM's ``RequestFuncOutput``); times in seconds,
    ``start_s`` on the benchmark's clock."""

    prompt_len: int
    success: bool = False
    output_tokens: int = 0
    ttft: float = 0.0
    itl: Sequence[float] = field(default_factory=list)  # a run's records give numpy arrays
    latency: float = 0.0
    start_s: float = 0.0
    generated_text: str = ""
    error: str = ""


def _stats(values: Sequence[float], percentiles: Sequence[float]) -> tuple[float, float, float,
                                                                           list[float]]:
    arr = np.asarray(values if len(values) else [0.0], dtype=np.float64) * 1000.0
    # one partition for every percentile: each is the same order statistics' interpolation
    pcts = [float(v) for v in np.percentile(arr, list(percentiles))] if percentiles else []
    return float(arr.mean()), float(np.median(arr)), float(arr.std()), pcts


def percentile_word(p: float) -> str:
    """vLLM's key spelling of a percentile: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def _peaks(ok: Sequence[RequestOutcome]) -> tuple[float, int]:
    """vLLM's peaks over one-second buckets from the first start, counted sparsely: memory
    grows with the tokens and requests, never with the run's span (a run at 1e-10 req/s
    spans 10^10 buckets)."""
    if not ok:
        return 0.0, 0
    t0 = min(o.start_s for o in ok)
    buckets = []
    starts = np.empty(len(ok), dtype=np.int64)
    ends = np.empty(len(ok), dtype=np.int64)
    for i, o in enumerate(ok):
        # token times as the running sum first + gap + gap ... (accumulate adds in order)
        times = np.add.accumulate(np.concatenate(([o.start_s + o.ttft],
                                                  np.asarray(o.itl, dtype=np.float64))))
        bucket = (times - t0).astype(np.int64)  # truncated toward zero, as int()
        buckets.append(bucket[bucket >= 0])
        starts[i], ends[i] = int(o.start_s - t0), int(o.start_s + o.latency - t0)
    _, counts = np.unique(np.concatenate(buckets), return_counts=True)
    # active requests per bucket: +1 at a request's first bucket, -1 after its last
    edges = np.concatenate((starts, ends + 1))
    steps = np.concatenate((np.ones(len(ok), np.int64), -np.ones(len(ok), np.int64)))
    order = np.lexsort((steps, edges))  # at one edge, ends (-1) before starts (+1)
    active = np.cumsum(steps[order])
    return float(counts.max()) if counts.size else 0.0, int(active.max())


def vllm_results(
    outcomes: Sequence[RequestOutcome],
    duration_s: float,
    *,
    percentile_metrics: Sequence[str] = DEFAULT_METRICS,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    goodput: Mapping[str, float] | None = None,
    detailed: bool = True,
) -> dict[str, Any]:
    """The result dict of one benchmark run (module docstring); ``detailed`` False sets
    ``itls`` (every gap of every request, the large list) to None."""
    unknown = [m for m in percentile_metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"--percentile-metrics: unknown metric {unknown[0]!r}; use "
                         f"{','.join(METRICS)}")
    ok = [o for o in outcomes if o.success]
    samples: dict[str, Sequence[float]] = {}
    ttft, tpot_samples, e2el = [], [], []
    tpot_for_goodput: list[float] = []
    for o in ok:
        tpot = (o.latency - o.ttft) / (o.output_tokens - 1) if o.output_tokens > 1 else 0.0
        if o.output_tokens > 1:
            tpot_samples.append(tpot)
        tpot_for_goodput.append(tpot)
        ttft.append(o.ttft)
        e2el.append(o.latency)
    # pooled in request order as one array: a 100k-request run has tens of millions of gaps
    itl = np.concatenate([np.asarray(o.itl, dtype=np.float64) for o in ok] or [np.empty(0)])
    samples.update(ttft=ttft, tpot=tpot_samples, itl=itl, e2el=e2el)
    good = 0
    if goodput:
        per_request = {"ttft": samples["ttft"], "tpot": tpot_for_goodput,
                       "e2el": samples["e2el"]}
        good = sum(all(per_request[k][i] <= slo / 1000.0 for k, slo in goodput.items())
                   for i in range(len(ok)))
    output_lens = [o.output_tokens if o.success else 0 for o in outcomes]
    total_in = sum(o.prompt_len for o in ok)
    total_out = sum(output_lens)
    peak_tokens, peak_active = _peaks(ok)
    dur = duration_s if duration_s > 0 else float("nan")
    result: dict[str, Any] = {
        "duration": duration_s,
        "completed": len(ok),
        "failed": len(outcomes) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / dur,
        "request_goodput": good / dur if goodput else None,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "input_lens": [o.prompt_len for o in outcomes],
        "output_lens": output_lens,
        "ttfts": [o.ttft for o in outcomes],
        "itls": [[float(g) for g in o.itl] for o in outcomes] if detailed else None,
        "generated_texts": [o.generated_text for o in outcomes],
        "errors": [o.error for o in outcomes],
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_active,
    }
    for m in METRICS:
        if m not in percentile_metrics:
            continue
        mean, median, std, pcts = _stats(samples[m], percentiles)
        result[f"mean_{m}_ms"], result[f"median_{m}_ms"], result[f"std_{m}_ms"] = (
            mean, median, std)
        for p, value in zip(percentiles, pcts, strict=True):
            result[f"p{percentile_word(p)}_{m}_ms"] = value
    return result


def outcomes_from_records(records: RunRecords) -> list[RequestOutcome]:
    """A run's finished requests as outcomes, on the engine's clock: start = arrival, the
    token times from ``records.tokens`` (each request's ITLs a numpy array); requests that
    produced no token, or ended with ``error`` or ``abort``, count as failed. In finish
    order."""
    toks = records.tokens
    codes = np.array(toks.request, dtype=np.int32)
    order = np.argsort(codes, kind="stable")  # each request's tokens in emission order
    times = np.array(toks.time_s, dtype=np.float64)[order]
    del order
    counts = np.bincount(codes, minlength=len(toks.request_ids.values))
    starts = np.cumsum(counts) - counts
    code_of = {rid: i for i, rid in enumerate(toks.request_ids.values)}
    out = []
    for r in records.requests:
        code = code_of.get(r.request_id)
        ts = times[starts[code]:starts[code] + counts[code]] if code is not None else times[:0]
        ok = bool(ts.size) and r.finish_reason in ("stop", "length")
        out.append(RequestOutcome(
            prompt_len=r.prompt_tokens, success=ok, output_tokens=r.output_tokens if ok else 0,
            ttft=float(ts[0]) - r.arrival_s if ok else 0.0,
            itl=np.diff(ts) if ok else [],
            latency=float(ts[-1]) - r.arrival_s if ok else 0.0, start_s=r.arrival_s,
            error="" if ok else f"finish_reason {r.finish_reason}"))
    return out


@dataclass(frozen=True)
class ResultOptions:
    """What each entry reports: the metrics and percentiles of the ``mean_/median_/std_/pNN_``
    keys, and the goodput SLOs in ms (None: ``request_goodput`` is null)."""

    percentile_metrics: tuple[str, ...] = METRICS
    percentiles: tuple[float, ...] = RUN_PERCENTILES
    goodput: dict[str, float] | None = None


def slo_goodput(slo: SloSpec | None) -> dict[str, float] | None:
    """The scenario's SLOs as vLLM's ``--goodput`` dict (ms), or None without any."""
    if slo is None:
        return None
    out = {}
    if slo.ttft_p99_ms is not None:
        out["ttft"] = slo.ttft_p99_ms
    if slo.itl_p99_ms is not None:
        out["tpot"] = slo.itl_p99_ms
    return out or None


def run_vllm_result(result: RunResult, target: str, goodput: dict[str, float] | None,
                    options: ResultOptions | None = None) -> dict[str, Any]:
    """One run's entry (module docstring); ``goodput`` overrides ``options.goodput``."""
    opts = options or ResultOptions()
    outcomes = outcomes_from_records(result.records)
    ok = [o for o in outcomes if o.success]
    start = min((o.start_s for o in outcomes), default=0.0)
    end = max((o.start_s + o.latency for o in ok), default=start)
    res = vllm_results(outcomes, end - start, percentile_metrics=opts.percentile_metrics,
                       percentiles=opts.percentiles, goodput=goodput, detailed=False)
    for key in DETAILED_KEYS:
        del res[key]
    for key, value in res.items():  # vLLM divides by a zero span too; JSON has no NaN
        if isinstance(value, float) and math.isnan(value):
            res[key] = None
    s = result.spec
    return {"arm": s.arm, "target": target, "point_id": s.point_id, "repeat": s.repeat,
            "valid": result.valid, **res}


def vllm_run_results(runs: Sequence[RunResult], target: str, slo: SloSpec | None,
                     options: ResultOptions | None = None) -> list[dict[str, Any]]:
    """vllm_results.json's document: one entry per run, in execution order; goodput from
    ``options.goodput`` when given, else from the scenario's ``slo``."""
    opts = options or ResultOptions()
    goodput = opts.goodput if opts.goodput is not None else slo_goodput(slo)
    return [run_vllm_result(r, target, goodput, opts) for r in runs]
