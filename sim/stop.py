"""A stop request the simulation loop checks between steps: a SIGTERM during a long run ends
it within a step, not at the end of the run. The signal handler only sets the flag (nothing is
raised inside the compiled loop: ``engine/_native.py``, requirement 4); the loop raises
``SimulationStopped``."""

from __future__ import annotations

REQUESTED: list[bool] = [False]  # a list, so the compiled loop reads the live value


def request() -> None:
    """Ask every running simulation to stop after its current step."""
    REQUESTED[0] = True


def clear() -> None:
    """Withdraw the request (a new command starts)."""
    REQUESTED[0] = False
