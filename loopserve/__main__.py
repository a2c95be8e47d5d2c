"""``python -m loopserve`` is the ``loopserve`` command (``loopserve.cli.run``)."""

from loopserve.cli import run

run()
