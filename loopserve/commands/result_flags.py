"""vLLM's result flags on ``loopserve run`` / ``sweep`` / ``capacity``: ``--percentile-metrics``,
``--metric-percentiles`` and ``--goodput``, parsed before any run so a bad value is one line
(exit 2) with nothing run or written."""

from __future__ import annotations

import argparse

from loopserve.commands.args import flag_error
from loopserve.outputs.vllm_results import METRICS, parse_goodput, parse_metrics, parse_percentiles
from loopserve.outputs.vllm_run import PERCENTILES, ResultOptions

DEFAULT_METRICS = ",".join(METRICS)
DEFAULT_PERCENTILES = ",".join(f"{p:g}" for p in PERCENTILES)


def add_result_flags(p: argparse.ArgumentParser) -> None:
    """Register the three flags (defaults: every metric at 50,90,99; the scenario's slo)."""
    p.add_argument("--percentile-metrics", default=DEFAULT_METRICS, metavar="M,M",
                   help=f"vllm_results.json's metrics, of {DEFAULT_METRICS} "
                   f"(default {DEFAULT_METRICS})")
    p.add_argument("--metric-percentiles", default=DEFAULT_PERCENTILES, metavar="P,P",
                   help=f"their percentiles (default {DEFAULT_PERCENTILES})")
    p.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                   help="per-request SLOs for request_goodput: ttft:MS tpot:MS e2el:MS "
                   "(default: the scenario's slo, ttft_p99_ms as ttft and itl_p99_ms as tpot)")


def result_options(args: argparse.Namespace) -> ResultOptions:
    """The parsed flags; UserError naming the flag on a bad value."""
    try:
        return ResultOptions(
            percentile_metrics=parse_metrics(args.percentile_metrics),
            percentiles=parse_percentiles(args.metric_percentiles),
            goodput=None if args.goodput is None else parse_goodput(args.goodput))
    except ValueError as err:
        raise flag_error(err, "--goodput") from None
