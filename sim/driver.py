"""The SimPy driver: one arrival process and one engine process per run (docs/design.md).

Each engine turn::

    batch  = core.schedule(env.now)
    result = executor.execute(batch)
    yield env.timeout(clock.end_of(batch, env.now) - env.now)  # sim.step_clock prices it
    events = core.apply(batch, result, env.now)

Arrivals whose time has come are submitted before every ``schedule``, so an arrival at the
same instant a step ends is seen by the next schedule whatever order SimPy fires the two
events in. Arrivals triggered by a token (``source.on_token``) arrive at that token's time.
When the core has no work the engine waits on an idle event that the arrival process
triggers. Per-step work is O(batch); only raw rows are stored, metrics come after the run.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import simpy

from engine.core.arrivals import ArrivalFeeder
from engine.core.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.records import ArrivalSource, RunRecorder, RunRecords
from engine.core.run_loop import StepLoop, stall_message
from engine.core.seeded_executor import SeededExecutor, SignalFn
from sim.cost.base import CostModel
from sim.errors import SimulationDeadlock
from sim.step_clock import StepClock, run_without_gc, stopped_after
from sim.stop import REQUESTED as STOP_REQUESTED


class _SimRun:
    def __init__(
        self,
        cfg: EngineConfig,
        source: ArrivalSource,
        cost: CostModel,
        executor: SeededExecutor,
        record_batches: bool,
        record_steps: bool = True,
    ) -> None:
        self.env = simpy.Environment(initial_time=0.0)  # float times from the first row on
        self.core = EngineCore(cfg)
        self.source = source
        self.cost = cost
        self.executor = executor
        self.loop = StepLoop(self.core, source, record_batches, record_steps)
        assert self.loop.recorder is not None and self.loop.feeder is not None
        self.recorder: RunRecorder = self.loop.recorder
        self.feeder: ArrivalFeeder = self.loop.feeder
        self.idle: simpy.Event | None = None

    def wake(self) -> None:
        if self.idle is not None and not self.idle.triggered:
            self.idle.succeed()

    def arrival_process(self) -> Generator[simpy.Event, Any, None]:
        env, feeder = self.env, self.feeder
        while not feeder.exhausted:
            due = feeder.next_due_s
            if due > env.now:
                yield env.timeout(due - env.now)
            # Submit by the arrival's own time: env.now may sit an ulp below it.
            feeder.submit_due(max(due, env.now))
            self.wake()

    # ---- engine --------------------------------------------------------------------------
    def wait_for_arrival(self) -> simpy.Event:
        self.idle = self.env.event()
        return self.idle

    def engine_process(self) -> Generator[simpy.Event, Any, None]:
        """Run steps back to back; SimPy time catches up only at arrival boundaries.

        Between two timed arrivals nothing but this process can act, so consecutive steps
        advance a local clock and yield one timeout when a step crosses the next arrival (or
        before waiting idle). Each step's start is the previous end, exactly as one timeout
        per step would give, so the rows are the same to the bit.
        """
        env, core, executor = self.env, self.core, self.executor
        loop, feeder = self.loop, self.feeder
        stop_requested = STOP_REQUESTED  # a local: read after every step
        now = env.now
        clock = StepClock(self.cost, now)
        while True:
            if feeder.next_due_s <= now:
                feeder.submit_due(now)
            batch = core.schedule(now) if core.has_work() else None
            if batch is None:
                if now > env.now:
                    yield env.timeout(now - env.now)
                if feeder.exhausted:
                    if core.has_work():
                        raise SimulationDeadlock(stall_message(core, now))
                    break
                yield self.wait_for_arrival()
                now = env.now
                continue
            start = now
            result = executor.execute(batch)
            end = now = clock.end_of(batch, start)
            if feeder.next_due_s <= end:
                yield env.timeout(end - env.now)
            loop.after_step(batch, result, start, end)
            if stop_requested[0]:
                raise stopped_after(batch)
        loop.drain()  # nothing left for a runner to release

    def run(self) -> RunRecords:
        t0 = time.perf_counter()
        self.env.process(self.arrival_process())
        engine = self.env.process(self.engine_process())
        run_without_gc(self.env, engine)
        records = self.recorder.records
        records.wall_s = time.perf_counter() - t0
        return records


def simulate(
    cfg: EngineConfig,
    source: ArrivalSource,
    cost: CostModel,
    *,
    signal_fn: SignalFn | None = None,
    seed: int = 0,
    record_batches: bool = False,
    vocab_size: int = 64,
    record_steps: bool = True,
) -> RunRecords:
    """Run ``source`` through an ``EngineCore(cfg)`` in simulated time and return its rows.

    Times are simulated seconds from 0. ``seed`` drives sampled tokens, ``signal_fn`` the
    gate signals of adaptive exit modes (``sim.exit_model.make_signal_fn``); without
    ``record_steps`` the step rows are only counted (``RunRecorder``). Raises
    ``SimulationDeadlock`` if the core stalls with work left, ValueError on a bad request.
    """
    executor = SeededExecutor(seed=seed, vocab_size=vocab_size, signal_fn=signal_fn)
    return _SimRun(cfg, source, cost, executor, record_batches, record_steps).run()
