"""``python -m loopserve`` is the ``loopserve`` command (a signal during the imports, which
take a second or more, ends it with the same one line as one during the work; one after
the command has decided its exit status, while the interpreter shuts down, changes nothing)."""

import signal
import sys

from loopserve.runs import interrupts

try:
    # immediate from here on: no gap before the command's own handlers (cli.main) are set
    with interrupts.immediate():
        with interrupts.importing():  # held until the imports end (see interrupts.importing)
            from loopserve.cli import main
        status = main()
except interrupts.Interrupted as sig:
    print(f"loopserve: interrupted by {sig}; nothing written", file=sys.stderr)
    sys.exit(sig.exit_status)
for s in interrupts.SIGNALS:
    signal.signal(s, signal.SIG_IGN)
sys.exit(status)
