"""SIGINT and SIGTERM end a command cleanly: exit 128 + signal, one line, nothing written.

While the work runs (``deferred``) a signal only sets a flag that the run loop checks
between runs (``check``): raising KeyboardInterrupt inside the mypyc-compiled core or
simulator can abort the process (issue 13). While files are written (``immediate``) a
signal raises at once, so the staging folder is removed on the way out. A second signal
during deferred work raises at once too.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """A signal ended the command (BaseException: ``except Exception`` must not swallow it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


_pending: list[int] = []


def _defer(signum: int, frame: FrameType | None) -> None:
    if _pending:  # the second one: the user insists
        raise Interrupted(signum)
    _pending.append(signum)


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def check() -> None:
    """Raise ``Interrupted`` if a signal arrived since the handlers were installed."""
    if _pending:
        raise Interrupted(_pending[0])


@contextmanager
def _handlers(handler: signal._HANDLER) -> Iterator[None]:
    old = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def deferred() -> Iterator[None]:
    """Signals set a flag (see ``check``); one still pending at the end raises then."""
    _pending.clear()
    try:
        with _handlers(_defer):
            yield
        check()
    finally:
        _pending.clear()


@contextmanager
def shielded() -> Iterator[None]:
    """A commit that must not be cut in two (renaming a set of written files): a signal
    inside it is dropped, the work being complete by the end. Outside the main thread
    (where handlers cannot be set) it shields nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = list(_pending)
    with _handlers(_defer):
        yield
    _pending[:] = saved


@contextmanager
def immediate() -> Iterator[None]:
    """Signals raise ``Interrupted`` at once (and one that arrived earlier does now)."""
    with _handlers(_raise):
        check()
        yield
