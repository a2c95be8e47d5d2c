"""The real loop's host time between steps, and a runner wrapper that records batches.

``run_realtime`` times each step as ``runner.execute`` alone; between two steps it applies the
last result, records it and schedules the next batch. That gap is invisible to per-step fits
but adds up in every inter-token latency, so calibration measures it on short closed runs of
every arm (all requests at t=0, so the schedule does not depend on timing) and fits it like a
stage (``step_gap``). ``RecordingRunner`` is also how ``loopserve fidelity`` gets the measured
batches: it forwards everything to the real runner and keeps each executed ``Batch``.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from engine.core.batch import Batch
from engine.core.config import EngineConfig
from engine.core.records import ArrivalSpec, RunRecords
from engine.core.request import SamplingParams
from engine.core.results import StepResult, TokenEvent
from engine.runner import ModelRunner
from sim.cost.calibrated import stage_kind
from sim.cost.features import batch_features
from sim.cost.fit import Sample


class RecordingRunner:
    """Forwards to a ``ModelRunner`` and keeps every executed batch with its execute time."""

    def __init__(self, runner: ModelRunner) -> None:
        self._runner = runner
        self.batches: list[Batch] = []
        self.execute_s: list[float] = []
        self.cpu_s: list[float] = []  # the calling thread's CPU time in execute

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def execute(self, batch: Batch) -> StepResult:
        c0 = time.thread_time()
        t0 = time.perf_counter()
        try:
            return self._runner.execute(batch)
        finally:
            self.execute_s.append(time.perf_counter() - t0)
            self.cpu_s.append(time.thread_time() - c0)
            self.batches.append(batch)


@dataclass
class ClosedSource:
    """Every request arrives at t=0; nothing is triggered."""

    specs: list[ArrivalSpec] = field(default_factory=list)

    def initial(self) -> list[ArrivalSpec]:
        return list(self.specs)

    def on_token(self, event: TokenEvent) -> list[ArrivalSpec]:
        return []

    def triggers_on_tokens(self) -> bool:
        return False


def gap_workload(cfg: EngineConfig, *, decoders: int, prompt_tokens: int, output_tokens: int,
                 long_prompt: int, seed: int = 0) -> ClosedSource:
    """A steady decode population plus one long prompt, all at t=0."""
    rng = random.Random(seed)
    vocab = cfg.model.vocab_size
    params = SamplingParams(max_tokens=output_tokens, ignore_eos=True)
    specs = [
        ArrivalSpec(f"g{i}", tuple(rng.randrange(vocab) for _ in range(prompt_tokens)), params)
        for i in range(decoders)
    ]
    specs.append(ArrivalSpec("long", tuple(rng.randrange(vocab) for _ in range(long_prompt)),
                             SamplingParams(max_tokens=4, ignore_eos=True)))
    return ClosedSource(specs)


def gap_samples(records: RunRecords, batches: list[Batch], label: str) -> list[Sample]:
    """One sample per step after the first: the host time before it (previous end to its
    start), with the features of the batch it precedes."""
    steps = records.steps
    if len(steps) != len(batches):
        raise RuntimeError(f"{label}: {len(steps)} step records for {len(batches)} batches")
    out = []
    for prev, cur, batch in zip(steps, steps[1:], batches[1:], strict=False):
        gap = cur.start_s - prev.end_s
        if gap > 0:
            out.append(Sample("step_gap", batch_features(batch), gap, False,
                              f"{label} step {cur.step} {stage_kind(batch)}"))
    return out


def execute_samples(batches: list[Batch], execute_s: list[float], label: str) -> list[Sample]:
    """In-situ execute times of a real run (held out: used to score, never to fit); a decode
    call right after prompt work scores the ``decode_after_prompt`` model."""
    return [
        Sample(stage_kind(b, batches[i - 1] if i else None), batch_features(b), t, True,
               f"{label} step {b.step}")
        for i, (b, t) in enumerate(zip(batches, execute_s, strict=True)) if t > 0
    ]


def trim_outliers(samples: list[Sample], quantile: float = 0.99) -> list[Sample]:
    """Drop samples above the ``quantile`` of their times (a garbage-collector pause or a
    neighbour's burst is not a property of the batch)."""
    if len(samples) < 20:
        return samples
    times = sorted(s.seconds for s in samples)
    cut = times[min(len(times) - 1, int(quantile * len(times)))]
    return [s for s in samples if s.seconds <= cut]
