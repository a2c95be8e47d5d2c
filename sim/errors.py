"""The simulator's exceptions. Kept out of the mypyc build (``tools/build_native.py``): raised
at most once per run, they gain nothing from compiling."""

from __future__ import annotations


class SimulationDeadlock(RuntimeError):
    """The core holds work but schedules nothing, and no arrival can change that."""


class SimulationStopped(BaseException):
    """A stop was requested (``sim.stop.request``): the run ends between two steps, its rows
    unfinished. BaseException, as KeyboardInterrupt is: no ``except Exception`` keeps it."""
