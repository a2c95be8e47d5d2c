"""``loopserve serve``: an OpenAI-compatible streaming server over the real engine.

    loopserve serve --model PRESET_OR_DIR [--scenario FILE] [--arm mixed] [--host 127.0.0.1]
                    [--port 8000] [--max-waiting N] [--device cpu|cuda] [--seed S]
                    [--chat-template FILE] [--api-key KEY]

Endpoints: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (stream or not),
``GET /v1/models``, ``GET /health``, ``GET /metrics``. SIGTERM or Ctrl-C stops accepting,
gives in-flight requests ``--shutdown-timeout`` seconds, aborts the rest and exits 0.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from engine.core.config import DEFAULT_ARM
from loopserve.commands import command_help
from loopserve.commands.args import integer, number
from loopserve.errors import UserError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help=command_help("serve"))
    p.add_argument("--model", required=True, help="model preset name or checkpoint directory")
    p.add_argument("--scenario", help="scenario YAML whose scheduler/cache/exit/runner "
                   "settings the engine uses (default: the engine's defaults)")
    p.add_argument("--arm", default=DEFAULT_ARM,
                   help=f"atomic | per_depth | mixed | wavefront (default {DEFAULT_ARM})")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", default="8000", help="port (default 8000; 0 picks a free one)")
    p.add_argument("--max-waiting", default="1024",
                   help="accepted requests not yet running before answering 503 (default 1024)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--seed", default="0", help="weights seed of a preset (default 0)")
    p.add_argument("--served-model-name", help="the model id clients send (default --model)")
    p.add_argument("--max-num-seqs", help="without --scenario: scheduler.max_num_seqs")
    p.add_argument("--num-blocks", help="without --scenario: cache.num_blocks")
    p.add_argument("--enable-prefix-caching", action="store_true",
                   help="reuse cached prompt prefixes across requests "
                   "(cache.enable_prefix_caching)")
    p.add_argument("--chat-template", metavar="FILE",
                   help="jinja2 chat template for /v1/chat/completions (default: the "
                   "checkpoint's, from tokenizer_config.json; a preset's built-in ChatML)")
    p.add_argument("--api-key", default=os.environ.get("LOOPSERVE_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on every /v1/* request "
                   "(default: $LOOPSERVE_API_KEY; none: open)")
    p.add_argument("--shutdown-timeout", default="10",
                   help="seconds in-flight requests get after SIGTERM (default 10)")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from loopserve.server.launch import ServeOptions, build_service, serve

    if args.scenario is not None:
        # the scenario's own sections configure the engine: a flag here would be ignored
        for flag, value, field in (("--max-num-seqs", args.max_num_seqs, "scheduler.max_num_seqs"),
                                   ("--num-blocks", args.num_blocks, "cache.num_blocks")):
            if value is not None:
                raise UserError(flag, f"applies without --scenario only; set {field} in the "
                                "scenario instead")
    opts = ServeOptions(
        model=args.model, scenario=args.scenario, arm=args.arm, device=args.device,
        seed=integer("--seed", args.seed, 0), served_model_name=args.served_model_name,
        max_waiting=integer("--max-waiting", args.max_waiting, 1),
        max_num_seqs=None if args.max_num_seqs is None else integer(
            "--max-num-seqs", args.max_num_seqs, 1),
        num_blocks=None if args.num_blocks is None else integer(
            "--num-blocks", args.num_blocks, 1),
        enable_prefix_caching=args.enable_prefix_caching,
        chat_template=args.chat_template, api_key=args.api_key,
    )
    port = integer("--port", args.port, 0)
    if port > 65535:
        raise UserError("--port", f"must be in 1-65535 (0: any free port), got {port}")
    timeout = number("--shutdown-timeout", args.shutdown_timeout, 0)
    return serve(build_service(opts), args.host, port, shutdown_timeout_s=timeout)
