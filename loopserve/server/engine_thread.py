"""The engine's step loop on its own thread, fed by the HTTP side.

The core is single-threaded: only this thread touches it. The HTTP side puts commands on a
thread-safe queue (``submit``, ``abort``, ``stop``); the thread takes them all between steps,
so an abort never lands between a batch's schedule and its execute, and a disconnected
client's KV blocks and prompt state are released before the next step is scheduled (the
runner receives them with that step's housekeeping, or at once when the engine goes idle).
Each step's tokens go back to the asyncio loop in one ``call_soon_threadsafe`` call, as a
list per request queue. The loop is the real-time driver's step (schedule,
``engine.realtime.execute_or_fail``, then apply, record and collect through
``engine.core.run_loop.StepLoop``) with arrivals taken from the queue instead of a
precomputed source.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from engine.core.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.records import RunRecords
from engine.core.run_loop import StepLoop, stall_message
from engine.output_processor import OutputProcessor, TextTokenizer
from engine.parallel_sampling import HeldSamples
from engine.realtime import execute_or_fail
from engine.runner import ModelRunner
from loopserve.server.metrics import ServerMetrics
from loopserve.server.submission import Failure, Item, Submission

log = logging.getLogger("loopserve.server")


@dataclass(frozen=True, slots=True)
class _Abort:
    request_id: str


@dataclass(frozen=True, slots=True)
class _AbortAll:
    message: str


_STOP = object()


class EngineThread:
    """Owns a fresh ``EngineCore(cfg)`` executed by ``runner``; ``record`` keeps the run's
    records (steps, tokens, finished requests) for benchmarks, which a long-lived server
    must not do."""

    def __init__(self, cfg: EngineConfig, runner: ModelRunner,
                 metrics: ServerMetrics | None = None, *, record: bool = False,
                 tokenizer: TextTokenizer | None = None) -> None:
        self.core = EngineCore(cfg)
        self.outputs = OutputProcessor(self.core, tokenizer)  # text and stop strings
        self._held: HeldSamples[Submission] = HeldSamples()
        runner.bind(self.core)
        self.runner = runner
        self.metrics = metrics
        self.step_loop = StepLoop(self.core, record=record)  # as every driver does
        # Published for the HTTP side. Each counter has one writer: ``submitted`` the HTTP
        # side, ``taken`` and the published core counts this thread.
        self.num_running = 0
        self.core_waiting = 0
        self.submitted = 0
        self.taken = 0
        self._commands: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._sinks: dict[str, tuple[asyncio.Queue[list[Item]], float]] = {}
        self._last_token: dict[str, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    # ---- the HTTP side ------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="loopserve-engine")
        self._thread.start()

    def submit(self, sub: Submission) -> None:
        self.submitted += 1
        self._commands.put(sub)

    @property
    def num_waiting(self) -> int:
        """Requests submitted and not yet running: queued here or waiting in the core."""
        return self.submitted - self.taken + self.core_waiting

    def abort(self, request_id: str) -> None:
        self._commands.put(_Abort(request_id))

    def abort_all(self, message: str) -> None:
        """Fail every request the engine holds (the shutdown grace period is over)."""
        self._commands.put(_AbortAll(message))

    def stop(self, timeout_s: float = 30.0) -> None:
        """Abort what is left, release everything, join the thread."""
        if self._thread is None:
            return
        self._commands.put(_STOP)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise RuntimeError(f"engine thread did not stop within {timeout_s} s")
        self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def records(self) -> RunRecords | None:
        recorder = self.step_loop.recorder
        return None if recorder is None else recorder.records

    def now(self) -> float:
        return time.perf_counter() - self._t0

    # ---- the engine thread --------------------------------------------------------------------
    def _run(self) -> None:
        core = self.core
        try:
            while self._take_commands(block=not core.has_work()):
                if core.has_work():
                    try:
                        self._step()
                    except Exception as exc:  # noqa: BLE001 - fail the requests, keep serving
                        log.exception("engine step failed")
                        self._fail_all(f"engine error: {type(exc).__name__}: {exc}")
                if not core.has_work():
                    self.runner.release(core.take_housekeeping())
                    self._publish()
        finally:
            self._fail_all("server shutting down")
            self.runner.release(self.step_loop.drain())
            self._publish()

    def _take_commands(self, block: bool) -> bool:
        """Apply every queued command; False on stop."""
        get = self._commands.get
        try:
            cmd = get() if block else get(block=False)
        except queue.Empty:
            return True
        out: list[tuple[asyncio.Queue[list[Item]], list[Item]]] = []
        while True:
            if cmd is _STOP:
                self._finish(out)
                self._send(out)
                return False
            if isinstance(cmd, _Abort):
                self.outputs.drop(cmd.request_id)
                if self._held.drop(cmd.request_id):
                    self.taken += 1
                elif self._sinks.pop(cmd.request_id, None) is not None:
                    self.core.abort(cmd.request_id)
            elif isinstance(cmd, _AbortAll):
                self._fail_all(cmd.message)
            else:
                self._add(cmd, out)
            try:
                cmd = get(block=False)
            except queue.Empty:
                self._finish(out)  # aborted requests: counted now, even if the engine idles
                self._send(out)
                self._publish()  # taken requests now count as waiting in the core
                return True

    def _add(self, sub: Submission, out: list[tuple[asyncio.Queue[list[Item]], list[Item]]]
             ) -> None:
        leader = self.core.requests.get(sub.leader) if sub.leader is not None else None
        if leader is not None and not leader.output_token_ids:
            self._held.hold(leader.request_id, sub.request_id, sub)
            return
        self.taken += 1
        arrival = max(0.0, sub.accepted_perf - self._t0)
        try:
            self.outputs.add(sub.request_id, sub.params)
            self.core.add_request(sub.request_id, sub.prompt_token_ids, sub.params, arrival,
                                  prefix_group=sub.group)
        except ValueError as err:  # the HTTP side validates first; this is the backstop
            self.outputs.drop(sub.request_id)
            out.append((sub.sink, [Failure(str(err), sub.request_id)]))
            return
        self._sinks[sub.request_id] = (sub.sink, arrival)

    def _step(self) -> None:
        core, runner = self.core, self.runner
        batch = core.schedule(self.now())
        if batch is None:
            raise RuntimeError(stall_message(core, self.now()))
        start = self.now()
        result = execute_or_fail(core, runner, batch, log)  # a failed batch fails its requests
        end = self.now()
        events = self.step_loop.after_step(batch, result, start, end, runner.readbacks.last_step)
        out: dict[str, list[Item]] = {}
        ttfts: list[float] = []
        itls: list[float] = []
        for delta in self.outputs.process(events):
            ev = delta.event
            entry = self._sinks.get(ev.request_id)
            if entry is None:
                continue
            out.setdefault(ev.request_id, []).append(delta)
            last = self._last_token.get(ev.request_id)
            if last is None:
                ttfts.append(ev.time_s - entry[1])
            else:
                itls.append(ev.time_s - last)
            self._last_token[ev.request_id] = ev.time_s
        sends = [(self._sinks[rid][0], items) for rid, items in out.items()]
        finished_ids = self._finish(sends)
        for sub in self._held.release(events, finished_ids):
            self._add(sub, sends)
        if self.metrics is not None:
            self.metrics.step(batch.num_core_calls, batch.is_mixed, len(events))
            self.metrics.token_gaps(ttfts, itls)
        self._send(sends)
        self._publish()

    def _finish(self, sends: list[tuple[asyncio.Queue[list[Item]], list[Item]]]) -> list[str]:
        """Account for the requests finished since the last call; their ids."""
        finished = self.step_loop.take_finished()
        if not finished:
            return []
        for req in finished:
            self._last_token.pop(req.request_id, None)
            self.outputs.finish(req.request_id)
            entry = self._sinks.pop(req.request_id, None)
            if entry is not None and req.finish_reason == "error":
                sends.append((entry[0], [Failure(req.error or "engine error", req.request_id)]))
            if self.metrics is not None:
                self.metrics.finish(req)
        return [req.request_id for req in finished]

    def _fail_all(self, message: str) -> None:
        for rid in list(self.core.requests):
            self.core.abort(rid)
        held = self._held.release((), list(self._held.leaders()))
        self.taken += len(held)
        sends: list[tuple[asyncio.Queue[list[Item]], list[Item]]] = [
            (sink, [Failure(message, rid)]) for rid, (sink, _) in self._sinks.items()]
        sends += [(sub.sink, [Failure(message, sub.request_id)]) for sub in held]
        self._sinks.clear()
        self._finish([])
        self._send(sends)

    def _send(self, sends: list[tuple[asyncio.Queue[list[Item]], list[Item]]]) -> None:
        if not sends or self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(_deliver, sends)
        except RuntimeError:  # the loop closed first (shutdown): nobody is listening
            pass

    def _publish(self) -> None:
        core = self.core
        self.num_running = core.num_running
        self.core_waiting = core.num_waiting
        if self.metrics is not None:
            self.metrics.occupancy(core.num_running, core.num_waiting,
                                     core.block_manager.num_used_blocks)
            pc = core.block_manager.prefix_cache
            if pc is not None:
                self.metrics.prefix_cache(pc.stats.queried_tokens, pc.stats.hit_tokens)


def _deliver(sends: list[tuple[asyncio.Queue[list[Item]], list[Item]]]) -> None:
    for sink, items in sends:
        sink.put_nowait(items)
