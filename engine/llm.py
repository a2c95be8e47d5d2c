"""The LLM facade: offline generate / stream on the real engine (docs/design.md).

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
from engine.core.request import Request, SamplingParams, TokenLogprobs
from engine.core.results import TokenEvent
from engine.core.run_loop import StepLoop, stall_message
from engine.model.alloc import default_dtype
from engine.model.build import build_model
from engine.model.ouro import OuroForCausalLM
from engine.output_processor import OutputProcessor, TextTokenizer
from engine.parallel_sampling import HeldSamples, sample_params, sample_request_id
from engine.realtime import execute_or_fail
from engine.runner import ModelRunner

_SCHED_FIELDS = {f.name for f in dataclasses.fields(SchedulerConfig) if f.init}
_CACHE_FIELDS = {f.name for f in dataclasses.fields(CacheConfig) if f.init}
_DEFAULT_PARAMS = SamplingParams()


@dataclass(frozen=True, slots=True)
class CompletionOutput:
    """One sample of a finished request: its tokens, exit depths, finish reason, the
    per-token log-probabilities when asked for, and its text when the LLM has a tokenizer."""

    index: int
    output_token_ids: list[int]
    exit_depths: list[int]
    finish_reason: str | None
    logprobs: list[TokenLogprobs] | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """A finished request as ``LLM.generate`` returns it: ``outputs`` holds its ``n``
    samples; the other fields read the first one."""

    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]

    @property
    def output_token_ids(self) -> list[int]:
        return self.outputs[0].output_token_ids

    @property
    def exit_depths(self) -> list[int]:
        return self.outputs[0].exit_depths

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[0].finish_reason

    @property
    def logprobs(self) -> list[TokenLogprobs] | None:
        return self.outputs[0].logprobs

    @property
    def text(self) -> str | None:
        return self.outputs[0].text


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
    cuda_graphs: str = "off",
) -> ModelRunner:
    """A ModelRunner for a preset, a checkpoint directory or a built model; bound to the core
    when one is given (``run_realtime`` binds a fresh core itself). ``sync_steps`` makes each
    step wait for the device (CUDA step times for profiling and calibration); ``cuda_graphs``
    (off | decode | mixed) replays RECURRENT calls from CUDA graphs."""
    dtype = dtype or default_dtype(device)
    if isinstance(model_name_or_dir, OuroForCausalLM):
        model = model_name_or_dir
    else:
        model = build_model(model_name_or_dir, seed=seed, device=device, dtype=dtype)
    core = engine_cfg_or_core if isinstance(engine_cfg_or_core, EngineCore) else None
    cfg = core.cfg if core is not None else engine_cfg_or_core
    assert isinstance(cfg, EngineConfig)
    runner = ModelRunner(
        model, cfg, None, device, dtype, attention_backend, seed=seed, sync_steps=sync_steps,
        cuda_graphs=cuda_graphs,
    )
    if core is not None:
        runner.bind(core)
    return runner


class LLM:
    """Offline generation on the real engine: one EngineCore driven by one ModelRunner.

    ``model`` is a preset name, a checkpoint directory or a built ``OuroForCausalLM``;
    ``tokenizer`` (anything with ``decoder()``, e.g. ``engine.tokenizer``'s) gives
    the outputs a text and enables stop strings; remaining keyword arguments are
    SchedulerConfig / CacheConfig fields. ``n > 1`` follows ``engine.parallel_sampling``.
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
        tokenizer: TextTokenizer | None = None,
        **engine_kwargs: Any,
    ) -> None:
        dtype = dtype or default_dtype(device)
        if not isinstance(model, OuroForCausalLM):
            model = build_model(model, seed=seed, device=device, dtype=dtype)
        self.cfg = make_engine_config(model, arm=arm, exit=exit, **engine_kwargs)
        self.core = EngineCore(self.cfg)
        self.runner = build_runner(model, self.core, device, dtype, seed, attention_backend)
        self.loop = StepLoop(self.core)
        self.outputs = OutputProcessor(self.core, tokenizer)
        self._held: HeldSamples[tuple[str, list[int], SamplingParams, str]] = HeldSamples()
        self._ids = itertools.count()
        self._finished: list[Request] = []
        self._t0 = time.perf_counter()

    def _now(self) -> float:
        return time.perf_counter() - self._t0

    def add_request(
        self, prompt_token_ids: Sequence[int], params: SamplingParams | None = None,
        request_id: str | None = None,
    ) -> str:
        """Queue a request (its ``n`` samples); its id. Sample ``i`` runs as
        ``sample_request_id(id, i, n)``."""
        rid = request_id if request_id is not None else str(next(self._ids))
        params = params or SamplingParams()
        prompt = list(prompt_token_ids)
        group = sample_request_id(rid, 0, params.n) if params.n > 1 else None
        for i in range(params.n):
            sid, sp = sample_request_id(rid, i, params.n), sample_params(params, i)
            if group is not None and i > 0:
                self._held.hold(group, sid, (sid, prompt, sp, group))
            else:
                self._add_sample(sid, prompt, sp, group)
        return rid

    def _add_sample(
        self, request_id: str, prompt: list[int], params: SamplingParams, group: str | None
    ) -> None:
        self.outputs.add(request_id, params)
        self.core.add_request(request_id, prompt, params, self._now(), prefix_group=group)

    def abort(self, request_id: str) -> bool:
        self.outputs.drop(request_id)
        if self._held.drop(request_id):
            return True
        # An aborted leader's held samples are admitted on their own.
        for sid, prompt, sp, group in self._held.release((), [request_id]):
            self._add_sample(sid, prompt, sp, group)
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
        events = self.loop.after_step(batch, result, start, self._now())
        self.outputs.process(events)
        finished = self.loop.take_finished()
        self._finished += finished
        for sid, prompt, sp, group in self._held.release(
            events, (r.request_id for r in finished)
        ):
            self._add_sample(sid, prompt, sp, group)
        return events

    def pop_finished(self) -> list[Request]:
        """Requests finished since the last call (any reason, aborts too), in finish order."""
        out, self._finished = self._finished + self.loop.take_finished(), []
        return out

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
        plist = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        ids = self._submit(prompts, plist)
        while self.core.has_work():
            self.step()
        done = {req.request_id: req for req in self.pop_finished()}
        self.drain()
        outs = []
        for rid, prompt, sp in zip(ids, prompts, plist, strict=True):
            samples = [done[sample_request_id(rid, i, sp.n)] for i in range(sp.n)]
            outs.append(RequestOutput(rid, list(prompt), [
                self._sample_output(i, req) for i, req in enumerate(samples)]))
        return outs

    def _sample_output(self, index: int, req: Request) -> CompletionOutput:
        return CompletionOutput(
            index, list(req.output_token_ids), list(req.exit_depths), req.finish_reason,
            list(req.output_logprobs) if req.params.logprobs is not None else None,
            self.outputs.finish(req.request_id),
        )
