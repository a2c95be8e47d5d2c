"""SIGINT and SIGTERM end a command cleanly: exit 128 + signal, one line, nothing written.

While the work runs (``deferred``) a signal only sets a flag that the run loop checks
between runs (``check``) and the simulation loop between steps (``sim.stop``), so one
SIGTERM ends a long run within a step, and no exception is raised inside the mypyc-compiled
core or simulator (``engine/_native.py``, requirement 4). While files are written
(``immediate``) a signal raises at once, so the staging folder is removed on the way out.
A second signal during deferred work ends the process at once (``os._exit``, nothing having
been written yet, and no exception raised inside compiled code), or raises where
``hard_exit`` is off.
While a heavy module loads (``importing``) a signal is held and delivered when the import
ends: an exception raised in a handler inside a C extension's initialisation (numpy's, under
pandas or torch) comes out as an ImportError, not as the signal.
"""

from __future__ import annotations

import os
import signal
import sys
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
_hard_exit: list[bool] = [False]


def _defer(signum: int, frame: FrameType | None) -> None:
    if _pending:  # the second one: the user insists
        if _hard_exit[0]:
            # on a line of its own: a progress bar may hold the current one
            sys.stderr.write(f"\nloopserve: interrupted by {signal.Signals(signum).name}; "
                             "nothing written\n")
            sys.stderr.flush()
            os._exit(128 + signum)
        raise Interrupted(signum)
    _pending.append(signum)
    sim_stop = sys.modules.get("sim.stop")  # loaded by ``deferred``
    if sim_stop is not None:
        sim_stop.request()  # a running simulation ends after its step


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
def deferred(hard_exit: bool = True) -> Iterator[None]:
    """Signals set a flag (see ``check``); one still pending at the end raises then. With
    ``hard_exit`` (nothing may be staged inside), a second signal ends the process."""
    # here, not at the top: this module loads before the imports a signal may interrupt
    # (loopserve.cli.run), and sim's package imports numpy and simpy
    from sim import stop as sim_stop
    from sim.errors import SimulationStopped

    _pending.clear()
    sim_stop.clear()
    _hard_exit[0] = hard_exit
    try:
        with _handlers(_defer):
            yield
        check()
    except SimulationStopped:  # the simulation loop saw the flag: the signal's exit
        check()
        raise
    finally:
        _pending.clear()
        sim_stop.clear()
        _hard_exit[0] = False


@contextmanager
def shielded() -> Iterator[None]:
    """A commit that must not be cut in two (renaming a set of written files): a signal
    inside it is dropped, the work being complete by the end. Outside the main thread
    (where handlers cannot be set) it shields nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with _handlers(_drop):
        yield


def _drop(signum: int, frame: FrameType | None) -> None:
    pass


@contextmanager
def immediate() -> Iterator[None]:
    """Signals raise ``Interrupted`` at once (and one that arrived earlier does now)."""
    with _handlers(_raise):
        check()
        yield


@contextmanager
def importing() -> Iterator[None]:
    """Hold SIGINT / SIGTERM while the block imports modules, then deliver the first one held
    to the handlers that were there before (``immediate`` raises, ``deferred`` sets its flag,
    the default ends the process). Outside the main thread it holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append(signum)

    with _handlers(hold):
        yield
    if held:
        signal.raise_signal(held[0])
