"""The ``loopserve`` command's entry point (the console script and ``python -m loopserve``).

It imports nothing heavy itself, so a signal during the imports of the CLI (which take a
second or more) ends the command with the same one line as one during the work, never a
KeyboardInterrupt traceback; one after the command has decided its exit status, while the
interpreter shuts down, changes nothing.
"""

from __future__ import annotations

import signal
import sys
from typing import NoReturn

from loopserve.runs import interrupts


def run() -> NoReturn:
    """Import the CLI with signals held, run it, and exit with its status."""
    try:
        # immediate from here on: no gap before the command's own handlers (cli.main)
        with interrupts.immediate():
            with interrupts.importing():  # held until the imports end
                from loopserve.cli import main
            status = main()
    except interrupts.Interrupted as sig:
        print(f"loopserve: interrupted by {sig}; nothing written", file=sys.stderr)
        sys.exit(sig.exit_status)
    for s in interrupts.SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    sys.exit(status)
