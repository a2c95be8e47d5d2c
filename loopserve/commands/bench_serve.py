"""``loopserve bench serve``: load an OpenAI-compatible server, report as ``vllm bench serve``.

    loopserve bench serve --base-url URL --dataset-name sharegpt|random [--dataset-path FILE]
                          --num-prompts N [--request-rate R] [--burstiness B]
                          [--max-concurrency C] [--seed S] [--result-file out.json]

Prompt lengths come from ``--tokenizer`` (a preset or checkpoint directory; default: the
served model when it is one, else the byte-level fallback). The result file holds vLLM's
keys (``loopserve.outputs.vllm_results``); failed requests are counted there, not fatal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from pathlib import Path
from typing import Any

from loopserve.bench import client
from loopserve.bench.datasets import arrival_offsets, sample_random, sample_sharegpt
from loopserve.bench.report import summary_table
from loopserve.commands import command_help
from loopserve.commands.args import flag_error, integer, number
from loopserve.errors import UserError
from loopserve.outputs.files import atomic_write
from loopserve.outputs.vllm_results import (
    parse_goodput,
    parse_metrics,
    parse_percentiles,
    vllm_results,
)
from loopserve.schema.build import model_shape
from loopserve.server.tokenizer import ByteTokenizer, load_tokenizer


def add_parser(sub: Any) -> None:
    bench = sub.add_parser("bench", help=command_help("bench"))
    bsub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCH")
    p = bsub.add_parser("serve", help="vLLM-style serving benchmark over HTTP")
    p.add_argument("--base-url", default="http://127.0.0.1:8000", help="server URL")
    p.add_argument("--model", help="model id to send (default: the server's first model)")
    p.add_argument("--tokenizer", help="preset or checkpoint directory for prompt lengths")
    p.add_argument("--dataset-name", default="sharegpt", choices=("sharegpt", "random"))
    p.add_argument("--dataset-path", help="ShareGPT JSON file (sharegpt)")
    p.add_argument("--num-prompts", default="1000")
    p.add_argument("--sharegpt-output-len", help="fixed output length instead of the reply's")
    p.add_argument("--random-input-len", default="1024")
    p.add_argument("--random-output-len", default="128")
    p.add_argument("--random-range-ratio", default="0.0")
    p.add_argument("--request-rate", default="inf", help="requests/s (inf: all at once)")
    p.add_argument("--burstiness", default="1.0", help="gamma shape of the gaps (1: Poisson)")
    p.add_argument("--max-concurrency", help="most requests in flight")
    p.add_argument("--seed", default="0")
    p.add_argument("--ignore-eos", action="store_true", help="ask for exactly max_tokens")
    p.add_argument("--percentile-metrics", default="ttft,tpot,itl")
    p.add_argument("--metric-percentiles", default="99")
    p.add_argument("--goodput", nargs="+", default=[], metavar="KEY:MS",
                   help="SLOs for goodput: ttft:MS tpot:MS e2el:MS")
    p.add_argument("--result-file", help="write the result JSON here")
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


def requests_from_args(args: argparse.Namespace, tokenizer: Any, vocab_size: int) -> list[Any]:
    n = integer("--num-prompts", args.num_prompts, 1)
    seed = integer("--seed", args.seed, 0)
    try:
        if args.dataset_name == "sharegpt":
            if not args.dataset_path:
                raise UserError("--dataset-path", "required with --dataset-name sharegpt")
            out_len = None if args.sharegpt_output_len is None else integer(
                "--sharegpt-output-len", args.sharegpt_output_len, 1)
            return sample_sharegpt(args.dataset_path, n, tokenizer, seed, out_len)
        return sample_random(n, integer("--random-input-len", args.random_input_len, 1),
                             integer("--random-output-len", args.random_output_len, 1),
                             number("--random-range-ratio", args.random_range_ratio, 0),
                             vocab_size, seed)
    except ValueError as err:
        raise flag_error(err, "--dataset-path") from None


def main(args: argparse.Namespace, argv: list[str]) -> int:
    rate = number("--request-rate", args.request_rate, 0, allow_inf=True)
    burst = number("--burstiness", args.burstiness, 0)
    conc = None if args.max_concurrency is None else integer(
        "--max-concurrency", args.max_concurrency, 1)
    try:
        metrics = parse_metrics(args.percentile_metrics)
        pcts = parse_percentiles(args.metric_percentiles)
        goodput = parse_goodput(args.goodput)
        model = args.model or asyncio.run(client.served_model(args.base_url))
    except ValueError as err:
        raise flag_error(err, "--goodput") from None
    except OSError as err:
        raise UserError("--base-url", f"cannot reach {args.base_url} ({err})") from None
    tok = _tokenizer(args.tokenizer or model)
    vocab = getattr(tok, "vocab_size", None) or 256
    requests = requests_from_args(args, tok, vocab)
    try:
        offsets = arrival_offsets(len(requests), rate, burst, integer("--seed", args.seed, 0))
    except ValueError as err:
        raise flag_error(err, "--request-rate") from None
    outcomes, duration = asyncio.run(client.run(
        args.base_url, model, requests, offsets, max_concurrency=conc,
        ignore_eos=args.ignore_eos, progress=not args.no_progress))
    result = vllm_results(outcomes, duration, percentile_metrics=metrics,
                          percentiles=pcts, goodput=goodput or None)
    result.update({"backend": "openai", "endpoint_type": "openai", "model_id": model,
                   "tokenizer_id": getattr(tok, "name", "bytes"), "num_prompts": len(requests),
                   "request_rate": "inf" if math.isinf(rate) else rate, "burstiness": burst,
                   "max_concurrency": conc})
    print(summary_table(result, metrics, pcts))
    if args.result_file:
        atomic_write(Path(args.result_file), json.dumps(result, indent=2))
        print(f"result: {args.result_file}")
    return 0
