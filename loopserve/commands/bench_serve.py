"""``loopserve bench serve``: load OpenAI-compatible servers, report as ``vllm bench serve``.

    loopserve bench serve --base-url URL[,URL...] [--backend openai|openai-chat]
        --dataset-name sharegpt|random|prefix_repetition [--dataset-path FILE]
        --num-prompts N [--request-rate R | --ramp-up-strategy linear|exponential
        --ramp-up-start-rps A --ramp-up-end-rps B] [--burstiness B] [--max-concurrency C]
        [--num-warmups W] [--seed S] [--save-result] [--save-detailed] [--result-file F]
        [--result-dir D] [--result-filename F] [--label L] [--metadata KEY=VALUE ...]

Every flag is checked, every base URL probed (``loopserve.bench.probe``) and the result's
destination checked before the first request. Prompt lengths come from ``--tokenizer`` (a
preset or checkpoint directory; default: the served model when it is one, else the
byte-level fallback). Exit status: 0 when at least one request succeeded, 1 when none did
(the result is still written), 2 on a bad flag or a URL nothing answers at.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.tokenizer import ByteTokenizer, load_tokenizer
from loopserve.bench import client
from loopserve.bench.probe import base_urls, probe
from loopserve.bench.report import summary_table
from loopserve.bench.result_file import (
    default_filename,
    destination,
    parse_metadata,
    result_document,
)
from loopserve.bench.schedule import (
    RAMP_UP_STRATEGIES,
    arrival_offsets,
    ramp_up_offsets,
    ramp_up_rates,
    rps_change_events,
)
from loopserve.bench.stream import BACKENDS
from loopserve.commands import command_help
from loopserve.commands.args import (
    flag_error,
    integer,
    number,
    parse_goodput,
    parse_metrics,
    parse_percentiles,
)
from loopserve.commands.bench_data import add_dataset_flags, requests_from_args
from loopserve.errors import UserError
from loopserve.outputs.files import atomic_write
from loopserve.outputs.vllm_results import (
    vllm_results,
)
from loopserve.schema.build import model_shape
from loopserve.workloads.base import MAX_REQUESTS

HEAD_KEYS = {"date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id",
             "num_prompts", "request_rate", "burstiness", "max_concurrency", "ramp_up_strategy",
             "ramp_up_start_rps", "ramp_up_end_rps", "rps_change_events", "start_times",
             "base_urls", "num_warmups"}


def add_parser(sub: Any) -> None:
    bench = sub.add_parser("bench", help=command_help("bench"))
    bsub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCH")
    p = bsub.add_parser("serve", help="vLLM-style serving benchmark over HTTP")
    p.add_argument("--base-url", action="append", metavar="URL",
                   help="server URL; repeat it or separate URLs by commas to send round-robin "
                   "to several replicas (default http://127.0.0.1:8000)")
    p.add_argument("--backend", default="openai", choices=tuple(BACKENDS),
                   help="openai: /v1/completions; openai-chat: /v1/chat/completions")
    p.add_argument("--model", help="model id to send (default: the server's first model)")
    p.add_argument("--tokenizer", help="preset or checkpoint directory for prompt lengths")
    add_dataset_flags(p)
    p.add_argument("--request-rate", help="requests/s (default inf: all at once); not with "
                   "--ramp-up-strategy")
    p.add_argument("--burstiness", default="1.0",
                   help="gamma shape of the gaps (1: Poisson, inf: evenly spaced)")
    p.add_argument("--ramp-up-strategy", choices=RAMP_UP_STRATEGIES,
                   help="raise the rate from --ramp-up-start-rps to --ramp-up-end-rps over "
                   "the requests")
    p.add_argument("--ramp-up-start-rps", help="the ramp's first rate (req/s, > 0)")
    p.add_argument("--ramp-up-end-rps", help="the ramp's last rate (req/s)")
    p.add_argument("--max-concurrency", help="most requests in flight")
    p.add_argument("--num-warmups", default="0",
                   help="copies of the first request sent before the benchmark, in no metric")
    p.add_argument("--seed", default="0")
    p.add_argument("--ignore-eos", action="store_true", help="ask for exactly max_tokens")
    p.add_argument("--percentile-metrics", default="ttft,tpot,itl")
    p.add_argument("--metric-percentiles", default="99")
    p.add_argument("--goodput", nargs="+", default=[], metavar="KEY:MS",
                   help="SLOs for goodput: ttft:MS tpot:MS e2el:MS")
    p.add_argument("--connect-timeout", default=str(client.DEFAULT_CONNECT_TIMEOUT_S),
                   metavar="S", help="longest wait for a TCP connection (s, default %(default)s)")
    p.add_argument("--read-timeout", default=str(client.DEFAULT_READ_TIMEOUT_S), metavar="S",
                   help="longest wait for the next bytes of a response, the first token "
                   "included (s, default %(default)s)")
    p.add_argument("--save-result", action="store_true",
                   help="write the result JSON (under --result-dir, named by vLLM's rule)")
    p.add_argument("--save-detailed", action="store_true", help="keep the per-request lists "
                   "(input_lens, output_lens, ttfts, itls, start_times, errors ...)")
    p.add_argument("--result-file", help="write the result JSON to this path")
    p.add_argument("--result-dir", help="folder of the result JSON (implies --save-result)")
    p.add_argument("--result-filename",
                   help="file name of the result JSON (implies --save-result)")
    p.add_argument("--label", help="the result's label and file-name prefix (default: the "
                   "backend)")
    p.add_argument("--metadata", nargs="*", default=[], metavar="KEY=VALUE",
                   help="pairs recorded at the result's top level")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(handler=main)


def _tokenizer(name: str | None) -> Any:
    if name is None:
        return ByteTokenizer(256)
    try:
        return load_tokenizer(name, model_shape(name).vocab_size)
    except (UserError, ValueError):
        if Path(name).is_dir() or "/" in name:
            raise UserError("--tokenizer", f"{name}: not a preset or checkpoint "
                            "directory") from None
        return ByteTokenizer(256)  # a served name that is no local model: lengths in bytes


def _traffic(args: argparse.Namespace) -> tuple[float, float, tuple[str, float, float] | None]:
    """(rate, burstiness, ramp-up) from the flags; UserError on a bad or clashing one."""
    burst = number("--burstiness", args.burstiness, 0, allow_inf=True)
    if burst == 0:
        raise UserError("--burstiness", "must be > 0")
    ramp_flags = (args.ramp_up_start_rps, args.ramp_up_end_rps)
    if args.ramp_up_strategy is None:
        if any(f is not None for f in ramp_flags):
            raise UserError("--ramp-up-strategy", "required with --ramp-up-start-rps / "
                            "--ramp-up-end-rps")
        rate = number("--request-rate", args.request_rate or "inf", 0, allow_inf=True)
        if rate == 0:
            raise UserError("--request-rate", "must be > 0 or inf")
        return rate, burst, None
    if args.request_rate is not None:
        raise UserError("--request-rate", "not with --ramp-up-strategy: the ramp sets the rate")
    if any(f is None for f in ramp_flags):
        raise UserError("--ramp-up-start-rps", "--ramp-up-strategy needs both "
                        "--ramp-up-start-rps and --ramp-up-end-rps")
    start, end = (number(f, v, 0) for f, v in (("--ramp-up-start-rps", args.ramp_up_start_rps),
                                               ("--ramp-up-end-rps", args.ramp_up_end_rps)))
    start, end = (int(v) if v.is_integer() else v for v in (start, end))  # vLLM's are ints
    try:
        ramp_up_rates(2, args.ramp_up_strategy, start, end)
    except ValueError as err:
        raise flag_error(err, "--ramp-up-start-rps") from None
    return math.inf, burst, (args.ramp_up_strategy, start, end)


def main(args: argparse.Namespace, argv: list[str]) -> int:
    rate, burst, ramp = _traffic(args)
    conc = None if args.max_concurrency is None else integer(
        "--max-concurrency", args.max_concurrency, 1)
    warmups = integer("--num-warmups", args.num_warmups, 0)
    if warmups > MAX_REQUESTS:
        raise UserError("--num-warmups", f"{warmups} is over the limit of {MAX_REQUESTS}")
    seed = integer("--seed", args.seed, 0)
    timeouts = client.Timeouts(number("--connect-timeout", args.connect_timeout, 0.001),
                               number("--read-timeout", args.read_timeout, 0.001))
    try:
        metrics = parse_metrics(args.percentile_metrics)
        pcts = parse_percentiles(args.metric_percentiles)
        goodput = parse_goodput(args.goodput)
    except ValueError as err:
        raise flag_error(err, "--goodput") from None
    reserved = HEAD_KEYS | set(vllm_results([], 1.0, percentile_metrics=metrics,
                                            percentiles=pcts))
    metadata = parse_metadata(args.metadata, reserved)
    bases = base_urls(args.base_url)
    served = asyncio.run(probe(bases, timeouts, need_id=args.model is None))
    model = args.model or served
    assert model is not None
    tok = _tokenizer(args.tokenizer or model)
    requests = requests_from_args(args, tok, getattr(tok, "vocab_size", None) or 256, seed)
    try:
        offsets = (arrival_offsets(len(requests), rate, burst, seed) if ramp is None
                   else ramp_up_offsets(len(requests), *ramp, burst, seed))
    except ValueError as err:
        raise flag_error(err, "--request-rate") from None
    label = args.label or args.backend
    started = datetime.now()
    date = started.strftime("%Y%m%d-%H%M%S")
    dest = None
    if (args.save_result or args.result_file or args.result_dir
            or args.result_filename):
        dest = destination(args.result_file, args.result_dir, args.result_filename,
                           default_filename(label, model, date, rate, conc, ramp))
    outcomes, duration = asyncio.run(client.run(
        bases, model, requests, offsets, max_concurrency=conc, ignore_eos=args.ignore_eos,
        progress=not args.no_progress, backend=args.backend, num_warmups=warmups,
        timeouts=timeouts))
    bench = vllm_results(outcomes, duration, percentile_metrics=metrics, percentiles=pcts,
                         goodput=goodput or None)
    head = {"date": date, "endpoint_type": args.backend, "backend": args.backend,
            "label": args.label, "model_id": model,
            "tokenizer_id": getattr(tok, "name", "bytes"), "num_prompts": len(requests)}
    traffic: dict[str, Any] = {"request_rate": "inf" if math.isinf(rate) else rate,
                               "burstiness": burst, "max_concurrency": conc}
    if ramp is not None:
        traffic.update(ramp_up_strategy=ramp[0], ramp_up_start_rps=ramp[1],
                       ramp_up_end_rps=ramp[2])
        bench["rps_change_events"] = rps_change_events(
            list(ramp_up_rates(len(requests), *ramp)), offsets, started)
    bench.update(base_urls=bases, num_warmups=warmups)
    doc = result_document(head, metadata, traffic, bench, [o.start_s for o in outcomes],
                          args.save_detailed)
    print(summary_table(doc, metrics, pcts))
    if dest is not None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(dest, json.dumps(doc, indent=2))
        print(f"result: {dest}")
    failed = [o.error for o in outcomes if not o.success]
    if failed:
        first = failed[0].replace("\n", " ")[:200]
        what = "no request succeeded" if len(failed) == len(outcomes) else (
            f"{len(failed)} of {len(outcomes)} requests failed")
        print(f"loopserve: bench serve: {what}; first error: {first}", file=sys.stderr)
    return 1 if outcomes and len(failed) == len(outcomes) else 0
