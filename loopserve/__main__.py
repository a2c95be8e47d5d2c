"""``python -m loopserve`` is the ``loopserve`` command (``loopserve.entry``)."""

from loopserve.entry import run

run()
