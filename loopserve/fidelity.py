"""``loopserve fidelity``: the same scenario in simulation (calibrated) and on the real target."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    """Register the ``fidelity`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("fidelity", help="simulated vs measured: per-step and per-arm errors")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--profile", required=True, help="calibrated profile JSON")
    p.add_argument("--target", required=True, help="cpu | cuda")
    p.add_argument("--out", help="folder to write (default results/<name>/<run-id>-fidelity)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a dotted scenario field, value parsed as YAML (repeatable)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace, argv: list[str]) -> int:
    raise NotImplementedError
