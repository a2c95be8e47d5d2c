"""The ``loopserve`` command: parse the arguments and dispatch to the subcommand
(``loopserve.commands``: run | sweep | capacity | report | calibrate | exit-profile | fidelity | serve
| profile;
DESIGN.md §12).

Bad input of any kind prints ``loopserve: error: <field>: <message>`` on one line and exits 2
with nothing written.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from loopserve.commands import (
    bench_serve,
    calibrate,
    capacity,
    e2e,
    exit_profile,
    fidelity,
    profile,
    report,
    run,
    serve,
)
from loopserve.errors import UserError
from loopserve.runs import interrupts
from loopserve.runs.interrupts import Interrupted

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """Usage errors in the one-line form of every other bad input (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"loopserve: error: {' '.join(message.split())}; see --help\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="loopserve",
        description="Serving engine and simulator for looped language models.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (run, capacity, report, calibrate, exit_profile, fidelity, serve, bench_serve, e2e,
                    profile):
        command.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGINT / SIGTERM end every command but the server (which drains its requests itself)
    # with 128 + signal, one line and nothing written (loopserve.runs.interrupts)
    signals = contextlib.nullcontext() if args.command == "serve" else interrupts.immediate()
    try:
        with signals:
            # every subcommand sets its handler(args, argv): argv is recorded in env.json
            return int(args.handler(args, list(sys.argv if argv is None
                                               else ["loopserve", *argv])))
    except UserError as err:
        print(f"loopserve: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except Interrupted as sig:
        print(f"loopserve: interrupted by {sig}; nothing written", file=sys.stderr)
        return sig.exit_status
    except KeyboardInterrupt:
        print("loopserve: interrupted by SIGINT; nothing written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
