"""The simulated clock of one engine's step loop: each step is priced by the cost model from
the batch, the step before it and the idle time before it, and starts where the last ended.
The single-engine driver and every cluster replica advance their time through it, so a step
costs the same in both; ``run_without_gc`` runs a simulation with the cyclic collector off."""

from __future__ import annotations

import gc
from typing import Any

import simpy

from engine.core.batch import Batch
from engine.core.request import Stage
from sim.cost.base import CostModel, StepContext, Waits
from sim.errors import SimulationStopped

EMPTY_BATCH = Batch(-1, Stage.RECURRENT, ())  # the clock's context before its first step


class StepClock:
    """Prices the steps of one engine in the order they run.

    The clock hands the cost model one ``StepContext`` of its own, updated in place for each
    step (``CostModel``'s contract: a model keeps nothing of it).
    """

    def __init__(self, cost: CostModel, now: float) -> None:
        self.cost = cost
        self.ctx = StepContext(EMPTY_BATCH)
        self.prev: Batch | None = None
        self.last_end = now  # back to back, a step starts where the last ended: no idle time
        self.waits = Waits()
        self.duration = 0.0  # the last step's

    def end_of(self, batch: Batch, start: float) -> float:
        """When ``batch``, starting at ``start``, ends; ValueError on a negative price."""
        waits = self.waits
        waits.start(start - self.last_end)
        ctx = self.ctx
        ctx.batch = batch
        ctx.prev = self.prev
        ctx.idle_s = waits.idle_s
        ctx.since_idle = waits.since_idle
        duration = self.cost.step_time(ctx)
        self.prev = batch
        self.duration = duration
        if not duration >= 0.0:
            raise ValueError(f"cost model returned {duration!r} s for step {batch.step}")
        self.last_end = start + duration
        return self.last_end


def stopped_after(batch: Batch) -> SimulationStopped:
    """What a simulation raises after ``batch`` when a signal asked it to stop: the drivers
    read ``sim.stop.REQUESTED`` after every step and raise this when it is set."""
    return SimulationStopped(f"stopped at step {batch.step}")


def run_without_gc(env: simpy.Environment, until: Any = None) -> None:
    """``env.run(until)`` with the cyclic collector off: a run allocates millions of acyclic
    rows and items, and every full collection would walk all the rows kept so far."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        env.run(until=until)
    finally:
        if gc_was_enabled:
            gc.enable()
