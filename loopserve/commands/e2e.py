"""``loopserve e2e``: the RFC §6 end-to-end check over HTTP, beside the simulation.

    loopserve e2e SCENARIO [--target cpu|cuda] [--out DIR] [--set KEY=VALUE ...]

Every arm goes through a ``loopserve serve`` subprocess on the same seeded ShareGPT arrivals
(``loopserve.bench.e2e``); with ``cluster: {replicas: N, router: round_robin}`` N of them
per arm, request ``i`` to server ``i mod N``, beside the simulated cluster. One folder with
the per-arm client results, the simulation's and ``report.md``.
"""

from __future__ import annotations

import argparse
from typing import Any

from loopserve.bench.e2e import run_e2e
from loopserve.commands import command_help
from loopserve.commands.args import add_scenario_flags


def add_parser(sub: Any) -> None:
    p = sub.add_parser("e2e", help=command_help("e2e"))
    p.add_argument("scenario", help="scenario YAML with a sharegpt workload (and optionally "
                   "cluster: {replicas: N, router: round_robin})")
    p.add_argument("--target", default="cpu", choices=("cpu", "cuda"),
                   help="device the servers run on (default cpu)")
    add_scenario_flags(p, "folder to write (default results/e2e/<name>/<run-id>)",
                       "hide the progress bars")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace, argv: list[str]) -> int:
    dest, table = run_e2e(args.scenario, args.sets, args.target, args.out,
                          progress=not args.no_progress)
    print(table)
    print(f"report: {dest / 'report.md'}")
    return 0
