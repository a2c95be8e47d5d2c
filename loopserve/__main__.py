"""``python -m loopserve`` is the ``loopserve`` command (a signal during the imports, which
take a second or more, ends it with the same one line as one during the work)."""

import sys

from loopserve.runs import interrupts

try:
    with interrupts.immediate():
        from loopserve.cli import main
except interrupts.Interrupted as sig:
    print(f"loopserve: interrupted by {sig}; nothing written", file=sys.stderr)
    sys.exit(sig.exit_status)
sys.exit(main())
