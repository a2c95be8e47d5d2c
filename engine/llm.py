"""The LLM facade: offline generate / stream on the real engine (DESIGN.md §7).

Each ``step`` is the real-time driver's step (``engine.realtime``) without a workload: the
same schedule, execute-or-fail and ``StepLoop.after_step``.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engine.core.config import (
    DEFAULT_ARM,
    CacheConfig,
    EngineConfig,
    ExitConfig,
    SchedulerConfig,
)
from engine.core.engine_core import EngineCore
from engine.core.request import Request, SamplingParams
from engine.core.results import TokenEvent
from engine.core.run_loop import StepLoop, stall_message
from engine.model.alloc import default_dtype
from engine.model.build import build_model
from engine.model.ouro import OuroForCausalLM
from engine.realtime import execute_or_fail
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


def make_engine_config(
    model: OuroForCausalLM, *, arm: str = DEFAULT_ARM, exit: ExitConfig | None = None, **kwargs: Any
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
    attention_backend: str = "auto",
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


class LLM:
    """Offline generation on the real engine: one EngineCore driven by one ModelRunner.

    ``model`` is a preset name, a checkpoint directory or a built ``OuroForCausalLM``;
    remaining keyword arguments are SchedulerConfig / CacheConfig fields.
    """

    def __init__(
        self,
        model: str | OuroForCausalLM = "tiny",
        *,
        arm: str = DEFAULT_ARM,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
        seed: int = 0,
        exit: ExitConfig | None = None,
        attention_backend: str = "auto",
        **engine_kwargs: Any,
    ) -> None:
        dtype = dtype or default_dtype(device)
        if not isinstance(model, OuroForCausalLM):
            model = build_model(model, seed=seed, device=device, dtype=dtype)
        self.cfg = make_engine_config(model, arm=arm, exit=exit, **engine_kwargs)
        self.core = EngineCore(self.cfg)
        self.runner = build_runner(model, self.core, device, dtype, seed, attention_backend)
        self.loop = StepLoop(self.core)
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
        now = self._now()
        batch = self.core.schedule(now)
        if batch is None:
            if self.core.has_work():
                raise RuntimeError(stall_message(self.core, now))
            return []
        start = self._now()
        result = execute_or_fail(self.core, self.runner, batch)
        return self.loop.after_step(batch, result, start, self._now())

    def pop_finished(self) -> list[Request]:
        """Requests finished since the last call (any reason, aborts too), in finish order."""
        return self.loop.take_finished()

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
        while self.core.has_work():
            self.step()
        done = {req.request_id: _output(req) for req in self.pop_finished()}
        self.drain()
        return [done[i] for i in ids]


def _output(req: Request) -> RequestOutput:
    return RequestOutput(
        req.request_id, list(req.prompt_token_ids), list(req.output_token_ids),
        list(req.exit_depths), req.finish_reason,
    )
