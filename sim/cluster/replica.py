"""One replica of a simulated cluster: its own ``EngineCore`` stepped as ``sim.driver``
steps one engine, and, on a decode replica, the handoffs waiting for its slots and blocks or
landed and not yet taken (``sim.cluster.driver`` runs them)."""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Generator
from typing import Any, Protocol

import simpy

from engine.core.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.kv_handoff import land_prefilled, reserve_prefilled
from engine.core.records import ArrivalSource, ArrivalSpec
from engine.core.results import TokenEvent
from engine.core.run_loop import StepLoop
from engine.core.seeded_executor import SeededExecutor
from sim.cost.base import CostModel
from sim.step_clock import StepClock, stopped_after
from sim.stop import REQUESTED as STOP_REQUESTED


class ClusterRun(Protocol):
    """What a replica uses of the run it belongs to (``sim.cluster.driver.ClusterRun``)."""

    env: simpy.Environment
    source: ArrivalSource
    executor: SeededExecutor
    cost: CostModel
    record_batches: bool

    next_due_s: float
    """When the next timed arrival is due (inf: none left)."""

    def route_due(self, now_s: float) -> None:
        """Route every timed arrival due by ``now_s``."""

    def route(self, spec: ArrivalSpec, arrival_s: float) -> None:
        """Route one arrival."""

    def finished(self, replica: Replica, event: TokenEvent) -> None:
        """A request finished on ``replica`` with ``event``, its last token there."""


class Forward:
    """A replica's arrival source: nothing timed; the arrivals its tokens trigger go to the
    cluster's router instead of into this replica."""

    def __init__(self, run: ClusterRun) -> None:
        self.run = run

    def initial(self) -> list[ArrivalSpec]:
        return []

    def on_token(self, event: TokenEvent) -> list[ArrivalSpec]:
        for spec in self.run.source.on_token(event):
            self.run.route(spec, event.time_s)
        return []

    def triggers_on_tokens(self) -> bool:
        return self.run.source.triggers_on_tokens()


@dataclasses.dataclass(eq=False)
class Handoff:
    spec: ArrivalSpec
    arrival_s: float
    token_id: int
    reserved: simpy.Event
    landed_s: float = 0.0


class Replica:
    def __init__(self, run: ClusterRun, index: int, cfg: EngineConfig, role: str) -> None:
        self.run = run
        self.index = index
        self.role = role
        self.core = EngineCore(cfg)
        self.loop = StepLoop(self.core, Forward(run), run.record_batches)
        assert self.loop.feeder is not None
        self.feeder = self.loop.feeder
        self.idle: simpy.Event | None = None
        self.busy_s = 0.0
        self.outstanding = 0
        self.pending: deque[Handoff] = deque()  # decode: waiting for a slot and blocks
        self.landed: list[Handoff] = []  # decode: KV arrived, not yet taken

    @property
    def num_outstanding(self) -> int:
        return self.outstanding

    @property
    def num_free_blocks(self) -> int:
        return self.core.block_manager.num_free_blocks

    def wake(self) -> None:
        if self.idle is not None and not self.idle.triggered:
            self.idle.succeed()

    def take_handoffs(self, now: float) -> None:
        core = self.core
        while self.pending:
            h = self.pending[0]
            spec = h.spec
            if reserve_prefilled(core, spec.request_id, spec.prompt_token_ids, spec.params,
                                 h.arrival_s, now, spec.priority) is None:
                break  # FIFO: a later handoff never overtakes a blocked one
            self.pending.popleft()
            h.reserved.succeed()
        for h in self.landed:
            land_prefilled(core, h.spec.request_id, h.token_id, h.landed_s)
        self.landed.clear()

    def process(self) -> Generator[simpy.Event, Any, None]:
        """``sim.driver``'s engine loop, one timeout per step, never ending on its own: the
        run ends when no process has an event left."""
        run, env, core, loop = self.run, self.run.env, self.core, self.loop
        executor, cost = run.executor.for_another_engine(), run.cost
        stop_requested = STOP_REQUESTED  # a local: read after every step
        now = env.now
        clock = StepClock(cost, now)
        while True:
            if run.next_due_s <= now:
                run.route_due(now)
            if self.pending or self.landed:
                self.take_handoffs(now)
            batch = core.schedule(now) if core.has_work() else None
            if batch is None:
                if now > env.now:
                    yield env.timeout(now - env.now)
                self.idle = env.event()
                yield self.idle
                now = env.now
                continue
            start = now
            result = executor.execute(batch)
            end = now = clock.end_of(batch, start)
            yield env.timeout(end - env.now)
            events = loop.after_step(batch, result, start, end)
            self.busy_s += clock.duration
            for event in events:
                if event.finished:
                    run.finished(self, event)
            if stop_requested[0]:
                raise stopped_after(batch)
