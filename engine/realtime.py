"""The real-time driver (docs/design.md): ``run_realtime`` is the wall-clock twin of
``sim.driver.simulate``: the same EngineCore, the same arrival handling and the same records
(``engine.core.run_loop.StepLoop``), with a ModelRunner executing each batch.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass

from engine.core.arrivals import ArrivalFeeder
from engine.core.batch import Batch
from engine.core.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.records import ArrivalSource, RunRecords
from engine.core.results import StepResult
from engine.core.run_loop import StepLoop, stall_message
from engine.runner import ModelRunner


@dataclass(frozen=True, slots=True)
class HostTiming:
    """Host time of one step: scheduling, and batch preparation inside the runner."""

    step: int
    core_calls: int
    schedule_s: float
    prepare_s: float


def sleep_until(deadline_s: float) -> None:
    """Sleep, then spin the last millisecond, until ``time.perf_counter()`` reaches
    ``deadline_s`` (how the loop waits for a timed arrival; calibration waits the same way)."""
    while (left := deadline_s - time.perf_counter()) > 0:
        if left > 0.002:
            time.sleep(left - 0.001)


def execute_or_fail(core: EngineCore, runner: ModelRunner, batch: Batch,
                    log: logging.Logger | None = None) -> StepResult | None:
    """Run a batch; on an exception its requests fail (``core.fail``), ``log`` (a server's)
    gets the traceback, and None is returned."""
    try:
        return runner.execute(batch)
    except Exception as exc:  # noqa: BLE001 - any executor failure fails the batch, not the run
        if log is not None:
            log.exception("batch %d failed", batch.step)
        core.fail(batch, f"{type(exc).__name__}: {exc}")
        return None


class _RealtimeRun:
    def __init__(
        self, cfg: EngineConfig, source: ArrivalSource, runner: ModelRunner, record_batches: bool,
        host_timings: list[HostTiming] | None,
    ) -> None:
        self.core = EngineCore(cfg)
        runner.bind(self.core)
        self.runner = runner
        self.loop = StepLoop(self.core, source, record_batches)
        assert self.loop.feeder is not None
        self.feeder: ArrivalFeeder = self.loop.feeder
        self.host_timings = host_timings
        self.t0 = 0.0  # perf_counter at the loop's start (``_loop``), after the collection

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def wait_for_arrival(self) -> None:
        """Sleep, then spin, until the next timed arrival is due."""
        sleep_until(self.t0 + self.feeder.next_due_s)

    def run(self) -> RunRecords:
        # Objects alive before the run (a model, earlier runs' records) go to the permanent
        # generation, as vLLM does after start-up: a full collection over them mid-step shows
        # as a token-interval spike (docs/fidelity.md, "Effects measured on the same machine").
        # A caller that froze its own objects (a server after start-up) keeps them frozen.
        was_frozen = gc.get_freeze_count() > 0
        gc.collect()
        gc.freeze()
        try:
            return self._loop()
        finally:
            if not was_frozen:
                gc.unfreeze()

    def _loop(self) -> RunRecords:
        self.t0 = time.perf_counter()
        core, runner, loop, feeder = self.core, self.runner, self.loop, self.feeder
        while True:
            feeder.submit_due(self.now())
            if not core.has_work():
                if feeder.exhausted:
                    break
                self.wait_for_arrival()
                continue
            t_sched = self.now()
            batch = core.schedule(t_sched)
            schedule_s = self.now() - t_sched
            if batch is None:
                if feeder.exhausted:
                    raise RuntimeError(stall_message(core, t_sched))
                self.wait_for_arrival()
                continue
            start = self.now()
            result = execute_or_fail(core, runner, batch)
            end = self.now()
            loop.after_step(batch, result, start, end, runner.readbacks.last_step)
            if self.host_timings is not None:
                self.host_timings.append(HostTiming(
                    batch.step, batch.num_core_calls, schedule_s, runner.last_prepare_s
                ))
        runner.release(loop.drain())
        assert loop.recorder is not None
        loop.recorder.records.wall_s = self.now()
        return loop.recorder.records


def run_realtime(
    cfg: EngineConfig,
    source: ArrivalSource,
    runner: ModelRunner,
    *,
    record_batches: bool = False,
    host_timings: list[HostTiming] | None = None,
) -> RunRecords:
    """Replay ``source`` on wall-clock time through a fresh ``EngineCore(cfg)`` executed by
    ``runner``; times are seconds from the start. A batch that raises fails its requests
    (``core.fail``) and the run goes on. ``host_timings``, when given, receives one
    ``HostTiming`` per step."""
    return _RealtimeRun(cfg, source, runner, record_batches, host_timings).run()
