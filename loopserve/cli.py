"""The ``loopserve`` command: parse the arguments and dispatch to the subcommand
(``loopserve.commands``: run | sweep | capacity | tune | report | calibrate | exit-profile |
fidelity | serve | bench | e2e | profile; docs/design.md).

Bad input of any kind prints ``loopserve: error: <field>: <message>`` on one line and exits 2
with nothing written.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from loopserve.commands import COMMANDS
from loopserve.errors import UserError
from loopserve.runs import interrupts
from loopserve.runs.interrupts import Interrupted

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """Usage errors in the one-line form of every other bad input (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"loopserve: error: {' '.join(message.split())}; see --help\n")


def build_parser(command: str | None = None, *, full: bool = True) -> argparse.ArgumentParser:
    """The ``loopserve`` parser. With ``full``, every command's own parser; else only
    ``command``'s (its module is imported), the others by name and help alone, which is all
    ``loopserve --help`` and the dispatch of one command need."""
    p = _Parser(
        prog="loopserve",
        description="Serving engine and simulator for looped language models.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    added: set[str] = set()
    for name, (module, help_text) in COMMANDS.items():
        if module in added:
            continue  # a module registers all of its names at its first one (run, sweep)
        if full or name == command or COMMANDS.get(command or "", ("",))[0] == module:
            importlib.import_module(module).add_parser(sub)
            added.add(module)
        else:
            sub.add_parser(name, help=help_text)
    return p


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line: the first argument that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_command_of(words), full=False).parse_args(words)
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
    """The ``loopserve`` console script and ``python -m loopserve``: load the command's module
    with signals held, run the command, exit with its status. A signal during the imports (a
    second or more) ends it with the same one line as one during the work, never a
    KeyboardInterrupt traceback; one after the exit status is decided changes nothing."""
    try:
        # immediate from here on: no gap before the command's own handlers (main)
        with interrupts.immediate():
            with interrupts.importing():  # held until the imports end
                build_parser(_command_of(sys.argv[1:]), full=False)  # the command's module
            status = main()
    except Interrupted as sig:
        print(f"loopserve: interrupted by {sig}; nothing written", file=sys.stderr)
        sys.exit(sig.exit_status)
    for s in interrupts.SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    sys.exit(status)
