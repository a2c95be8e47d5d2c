"""The simulator's exceptions (outside the mypyc build: compiled classes cannot subclass
builtin exceptions)."""

from __future__ import annotations


class SimulationDeadlock(RuntimeError):
    """The core holds work but schedules nothing, and no arrival can change that."""
