"""The LLM facade (offline generate / stream) and the real-time driver (DESIGN.md §7).

``run_realtime`` is the wall-clock twin of ``sim.driver.simulate``: the same EngineCore, the
same arrival handling and the same records, with a ModelRunner executing each batch.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engine.core.arrivals import ArrivalFeeder
from engine.core.batch import Batch
from engine.core.config import CacheConfig, EngineConfig, ExitConfig, SchedulerConfig
from engine.core.engine_core import EngineCore
from engine.core.records import ArrivalSource, RunRecorder, RunRecords
from engine.core.request import SamplingParams
from engine.core.results import StepResult, TokenEvent
from engine.model.build import build_model, default_dtype
from engine.model.ouro import OuroForCausalLM
from engine.runner import ModelRunner

_SCHED_FIELDS = {f.name for f in dataclasses.fields(SchedulerConfig) if f.init}
_CACHE_FIELDS = {f.name for f in dataclasses.fields(CacheConfig) if f.init}
_DEFAULT_PARAMS = SamplingParams()


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """A finished request as ``LLM.generate`` returns it."""

    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    exit_depths: list[int]
    finish_reason: str | None


@dataclass(frozen=True, slots=True)
class HostTiming:
    """Host time of one step: scheduling, and batch preparation inside the runner."""

    step: int
    core_calls: int
    schedule_s: float
    prepare_s: float


def make_engine_config(
    model: OuroForCausalLM, *, arm: str = "mixed", exit: ExitConfig | None = None, **kwargs: Any
) -> EngineConfig:
    """An EngineConfig for ``model``; kwargs are SchedulerConfig or CacheConfig fields."""
    unknown = set(kwargs) - _SCHED_FIELDS - _CACHE_FIELDS
    if unknown:
        raise ValueError(f"{sorted(unknown)[0]}: unknown engine option")
    sched = {k: v for k, v in kwargs.items() if k in _SCHED_FIELDS}
    cache = {k: v for k, v in kwargs.items() if k in _CACHE_FIELDS}
    return EngineConfig(
        model=model.config.to_shape(),
        scheduler=SchedulerConfig(arm=arm, **sched),
        cache=CacheConfig(**cache),
        exit=exit or ExitConfig(),
    )


def build_runner(
    model_name_or_dir: str | OuroForCausalLM,
    engine_cfg_or_core: EngineConfig | EngineCore,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
    attention_backend: str = "torch",
    *,
    sync_steps: bool = False,
) -> ModelRunner:
    """A ModelRunner for a preset, a checkpoint directory or a built model; bound to the core
    when one is given (``run_realtime`` binds a fresh core itself). ``sync_steps`` makes each
    step wait for the device (CUDA step times for profiling and calibration)."""
    dtype = dtype or default_dtype(device)
    if isinstance(model_name_or_dir, OuroForCausalLM):
        model = model_name_or_dir
    else:
        model = build_model(model_name_or_dir, seed=seed, device=device, dtype=dtype)
    core = engine_cfg_or_core if isinstance(engine_cfg_or_core, EngineCore) else None
    cfg = core.cfg if core is not None else engine_cfg_or_core
    assert isinstance(cfg, EngineConfig)
    runner = ModelRunner(
        model, cfg, None, device, dtype, attention_backend, seed=seed, sync_steps=sync_steps
    )
    if core is not None:
        runner.bind(core)
    return runner


def _execute(core: EngineCore, runner: ModelRunner, batch: Batch) -> StepResult | None:
    """Run a batch; on an exception its requests fail (``core.fail``) and None is returned."""
    try:
        return runner.execute(batch)
    except Exception as exc:  # noqa: BLE001 - any executor failure fails the batch, not the run
        core.fail(batch, f"{type(exc).__name__}: {exc}")
        return None


class LLM:
    """Offline generation on the real engine: one EngineCore driven by one ModelRunner.

    ``model`` is a preset name, a checkpoint directory or a built ``OuroForCausalLM``;
    remaining keyword arguments are SchedulerConfig / CacheConfig fields.
    """

    def __init__(
        self,
        model: str | OuroForCausalLM = "tiny",
        *,
        arm: str = "mixed",
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
        seed: int = 0,
        exit: ExitConfig | None = None,
        attention_backend: str = "torch",
        **engine_kwargs: Any,
    ) -> None:
        dtype = dtype or default_dtype(device)
        if not isinstance(model, OuroForCausalLM):
            model = build_model(model, seed=seed, device=device, dtype=dtype)
        self.cfg = make_engine_config(model, arm=arm, exit=exit, **engine_kwargs)
        self.core = EngineCore(self.cfg)
        self.runner = build_runner(model, self.core, device, dtype, seed, attention_backend)
        self._ids = itertools.count()
        self._t0 = time.perf_counter()

    def _now(self) -> float:
        return time.perf_counter() - self._t0

    def add_request(
        self, prompt_token_ids: Sequence[int], params: SamplingParams | None = None,
        request_id: str | None = None,
    ) -> str:
        rid = request_id if request_id is not None else str(next(self._ids))
        self.core.add_request(rid, list(prompt_token_ids), params or SamplingParams(), self._now())
        return rid

    def abort(self, request_id: str) -> bool:
        return self.core.abort(request_id)

    def step(self) -> list[TokenEvent]:
        """Schedule, execute and apply one batch; [] when it failed or made no tokens."""
        batch = self.core.schedule(self._now())
        if batch is None:
            if self.core.has_work():
                raise RuntimeError(
                    f"engine stalled: {self.core.num_waiting} waiting and "
                    f"{self.core.num_running} running requests but nothing to schedule"
                )
            return []
        result = _execute(self.core, self.runner, batch)
        if result is None:
            return []
        return self.core.apply(batch, result, self._now())

    def drain(self) -> None:
        """Hand the runner what finished requests left behind (call when idle)."""
        self.runner.release(self.core.take_housekeeping())

    def _submit(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[str]:
        plist = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        if len(plist) != len(prompts):
            raise ValueError(f"params: {len(plist)} sampling params for {len(prompts)} prompts")
        return [self.add_request(p, sp) for p, sp in zip(prompts, plist, strict=True)]

    def stream(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams] = _DEFAULT_PARAMS,
    ) -> Iterator[TokenEvent]:
        """Token events of ``prompts`` as they are produced (other requests' events too)."""
        self._submit(prompts, params)
        while self.core.has_work():
            yield from self.step()
        self.drain()

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams] = _DEFAULT_PARAMS,
    ) -> list[RequestOutput]:
        """Run ``prompts`` (token ids) to completion; outputs in prompt order."""
        ids = self._submit(prompts, params)
        done: dict[str, RequestOutput] = {}
        while self.core.has_work():
            self.step()
            for req in self.core.pop_finished():
                done[req.request_id] = RequestOutput(
                    req.request_id, list(req.prompt_token_ids), list(req.output_token_ids),
                    list(req.exit_depths), req.finish_reason,
                )
        for req in self.core.pop_finished():
            done[req.request_id] = RequestOutput(
                req.request_id, list(req.prompt_token_ids), list(req.output_token_ids),
                list(req.exit_depths), req.finish_reason,
            )
        self.drain()
        return [done[i] for i in ids]


class _RealtimeRun:
    def __init__(
        self, cfg: EngineConfig, source: ArrivalSource, runner: ModelRunner, record_batches: bool,
        host_timings: list[HostTiming] | None,
    ) -> None:
        self.core = EngineCore(cfg)
        runner.bind(self.core)
        self.runner = runner
        self.source = source
        self.recorder = RunRecorder(record_batches)
        self.host_timings = host_timings
        self.feeder = ArrivalFeeder(self.core, source, self.recorder)
        self.t0 = 0.0  # perf_counter at the loop's start (``_loop``), after the collection

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def wait_for_arrival(self) -> None:
        """Sleep, then spin, until the next timed arrival is due."""
        due = self.feeder.next_due_s
        while (left := due - self.now()) > 0:
            if left > 0.002:
                time.sleep(left - 0.001)

    def run(self) -> RunRecords:
        # Objects alive before the run (a model, earlier runs' records) go to the permanent
        # generation, as vLLM does after start-up: a full collection over them took up to 215 ms
        # mid-step on a CPU, which a token interval then shows as a latency spike.
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
        core, runner, recorder, feeder = self.core, self.runner, self.recorder, self.feeder
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
                    raise RuntimeError(
                        f"at t={t_sched:.6f}s the core holds {core.num_waiting} waiting and "
                        f"{core.num_running} running requests but schedules nothing, and no "
                        "arrival is pending"
                    )
                self.wait_for_arrival()
                continue
            start = self.now()
            result = _execute(core, runner, batch)
            end = self.now()
            events = core.apply(batch, result, end) if result is not None else []
            if self.host_timings is not None:
                self.host_timings.append(
                    HostTiming(batch.step_id, batch.core_calls, schedule_s, runner.last_prepare_s)
                )
            feeder.on_events(events)
            recorder.step(batch, start, end, events)
            finished = core.pop_finished()
            if finished:
                recorder.finished(finished)
        runner.release(core.take_housekeeping())
        recorder.records.wall_s = self.now()
        return recorder.records


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
