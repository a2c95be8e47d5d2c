"""What follows every step, written once for every driver (docs/design.md).

The SimPy driver, the real-time driver, ``LLM.step`` and the server's engine thread differ
only in how time passes, how a batch is executed and where arrivals come from; after the
execution all of them hand the result to ``StepLoop``::

    batch  = core.schedule(now)            # driver: when, and on which clock
    result = executor.execute(batch)       # driver: None when the batch failed
    events = loop.after_step(batch, result, start_s, end_s)
"""

from __future__ import annotations

from engine.core.arrivals import ArrivalFeeder
from engine.core.batch import Batch, Housekeeping
from engine.core.engine_core import EngineCore
from engine.core.records import ArrivalSource, RunRecorder
from engine.core.request import Request
from engine.core.results import StepResult, TokenEvent


def stall_message(core: EngineCore, now_s: float) -> str:
    """The one error text of a core that holds work, schedules nothing, and can expect no
    arrival to change that (the drivers raise it; it is always a bug)."""
    return (
        f"at t={now_s:.6f}s the core holds {core.num_waiting} waiting and "
        f"{core.num_running} running requests but schedules nothing, and no arrival is pending"
    )


class StepLoop:
    """Applies each executed step to ``core``, hands its token events to the arrival feeder,
    records the step and collects the requests it finished.

    With a ``source`` (the drivers) arrivals are fed through ``feeder`` and everything is
    recorded in ``recorder``. Without one (``LLM``, the server) the caller adds requests
    itself and takes the finished ones from ``take_finished``, and ``record`` keeps the
    records then too.
    """

    def __init__(
        self, core: EngineCore, source: ArrivalSource | None = None, record_batches: bool = False,
        record_steps: bool = True, record: bool = False,
    ) -> None:
        self.core = core
        self.recorder: RunRecorder | None = None
        self.feeder: ArrivalFeeder | None = None
        if source is not None or record:
            self.recorder = recorder = RunRecorder(record_batches, record_steps)
            if source is not None:
                self.feeder = ArrivalFeeder(core, source, recorder)
        self._keep_finished = source is None
        self._finished: list[Request] = []

    def after_step(
        self, batch: Batch, result: StepResult | None, start_s: float, end_s: float,
        num_readbacks: int | None = None,
    ) -> list[TokenEvent]:
        """Everything that follows executing ``batch`` from ``start_s`` to ``end_s``;
        ``result`` None means the batch failed (the driver called ``core.fail``);
        ``num_readbacks``: what the runner read back (None: RFC §4's count, as simulated)."""
        core = self.core
        events = core.apply(batch, result, end_s) if result is not None else []
        feeder, recorder = self.feeder, self.recorder
        if events and feeder is not None:
            feeder.on_events(events)
        finished = core.pop_finished() if core.has_finished() else None
        if recorder is not None:
            recorder.step(batch, start_s, end_s, events, num_readbacks)
            if finished:
                recorder.finished(finished)
        if finished and self._keep_finished:
            self._finished.extend(finished)
        return events

    def drain(self) -> Housekeeping:
        """The run's end: what a runner must still release (finished requests' state); the
        records get the prefix cache's counters."""
        pc = self.core.block_manager.prefix_cache
        if self.recorder is not None and pc is not None:
            self.recorder.records.prefix_cache = pc.stats.copy()
        return self.core.take_housekeeping()

    def take_finished(self) -> list[Request]:
        """Requests finished since the last call, in finish order (without a source); those
        finished between steps (``abort``) are recorded here."""
        between = self.core.pop_finished()
        if between and self.recorder is not None:
            self.recorder.finished(between)
        out = self._finished + between
        self._finished = []
        return out
