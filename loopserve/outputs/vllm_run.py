"""``vllm_results.json``: every run's results in ``vllm bench serve``'s keys, beside
summary.json, written by the one writer the HTTP benchmark client uses
(``loopserve.outputs.vllm_results``).

Each entry is ``{arm, target, point_id, repeat, valid}`` then vLLM's flat keys, by default
with every metric (ttft, tpot, itl, e2el) at percentiles 50, 90 and 99 (``ResultOptions``:
``loopserve run --percentile-metrics/--metric-percentiles`` choose, as vLLM's flags do). As
``vllm bench serve`` without ``--save-detailed``, the per-request lists (input_lens, ttfts,
itls, ...) are left out. ``duration`` runs from the first arrival to the last finish (the span
summary.json's output tok/s uses). Goodput (DistServe's, as vLLM counts it) needs per-request
SLOs: ``--goodput ttft:MS tpot:MS e2el:MS``, else the scenario's ``slo``, where
``slo.ttft_p99_ms`` bounds each request's TTFT and ``slo.itl_p99_ms`` each request's TPOT (its
mean inter-token latency); with neither, ``request_goodput`` is null.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loopserve.outputs.vllm_results import METRICS, outcomes_from_records, vllm_results
from loopserve.schema.scenario import SloSpec
from loopserve.stats.metrics import RunResult

PERCENTILES = (50.0, 90.0, 99.0)
DETAILED_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")


@dataclass(frozen=True)
class ResultOptions:
    """What each entry reports: the metrics and percentiles of the ``mean_/median_/std_/pNN_``
    keys, and the goodput SLOs in ms (None: ``request_goodput`` is null)."""

    percentile_metrics: tuple[str, ...] = METRICS
    percentiles: tuple[float, ...] = PERCENTILES
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
