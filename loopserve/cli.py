"""The ``loopserve`` command: parse the arguments and dispatch to the subcommand
(``loopserve.commands``: run | sweep | capacity | report | calibrate | exit-profile | fidelity | serve;
DESIGN.md §12).

Bad input of any kind prints ``loopserve: error: <field>: <message>`` on one line and exits 2
with nothing written.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from loopserve.errors import UserError
from loopserve.runs import interrupts
from loopserve.runs.interrupts import Interrupted

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """Usage errors in the one-line form of every other bad input (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"loopserve: error: {' '.join(message.split())}; see --help\n")


def build_parser() -> argparse.ArgumentParser:
    # here, not at the top: the console script imports this module before any signal handler
    # is set (``run``), and the commands import pydantic, numpy and pandas
    from loopserve.commands import (
        bench_serve,
        calibrate,
        capacity,
        e2e,
        exit_profile,
        fidelity,
        report,
        run,
        serve,
    )

    p = _Parser(
        prog="loopserve",
        description="Serving engine and simulator for looped language models.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (run, capacity, report, calibrate, exit_profile, fidelity, serve,
                    bench_serve, e2e):
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


def run() -> NoReturn:
    """The ``loopserve`` console script and ``python -m loopserve``: load the commands with
    signals held, run the command, exit with its status. A signal during the imports (a
    second or more) ends it with the same one line as one during the work, never a
    KeyboardInterrupt traceback; one after the exit status is decided changes nothing."""
    try:
        # immediate from here on: no gap before the command's own handlers (main)
        with interrupts.immediate():
            with interrupts.importing():  # held until the imports end
                build_parser()  # imports every command
            status = main()
    except Interrupted as sig:
        print(f"loopserve: interrupted by {sig}; nothing written", file=sys.stderr)
        sys.exit(sig.exit_status)
    for s in interrupts.SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    sys.exit(status)
