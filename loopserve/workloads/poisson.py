"""Open-loop rate workloads: Poisson arrivals, and gamma arrivals (Poisson's mean rate with
tunable burstiness), with prompt and output length distributions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from engine.core.records import ArrivalSpec
from loopserve.workloads.base import (
    MIN_REQUEST_RATE,
    Count,
    LengthSpec,
    SharedPrefix,
    StaticSource,
    StrictModel,
    arrival_times,
    prompt_ids,
    request_trace,
    sample_lengths,
    sampling_params,
    with_prefix,
)


def rate_source(
    spec: PoissonWorkload | GammaWorkload,
    burstiness: float,
    *,
    seed: int,
    vocab_size: int,
    exit_trace: Sequence[int] | None,
) -> StaticSource:
    """``spec``'s requests ``req-0..`` with gaps of shape ``burstiness`` (1: Poisson); draws
    in a fixed order (arrival gaps, prompt lengths, output lengths) from ``default_rng(seed)``;
    a shared prefix draws from streams of its own, so the arrivals and lengths stay the same
    with or without."""
    num_requests, shared_prefix = spec.num_requests, spec.shared_prefix
    rng = np.random.default_rng(seed)
    times = arrival_times(num_requests, spec.request_rate, burstiness, rng)
    prompts = sample_lengths(spec.prompt_tokens, num_requests, rng)
    outputs = sample_lengths(spec.output_tokens, num_requests, rng)
    specs = [
        ArrivalSpec(
            f"req-{i}",
            with_prefix(shared_prefix, prompt_ids(seed, i, prompts[i], vocab_size),
                        seed=seed, index=i, vocab_size=vocab_size),
            sampling_params(outputs[i], request_trace(outputs[i], None, exit_trace)),
            arrival_s=times[i],
        )
        for i in range(num_requests)
    ]
    return StaticSource(specs)


class PoissonWorkload(StrictModel):
    """``num_requests`` Poisson arrivals at ``request_rate`` req/s."""

    kind: Literal["poisson"]
    num_requests: Count
    request_rate: float = Field(ge=MIN_REQUEST_RATE, allow_inf_nan=False)
    prompt_tokens: LengthSpec
    output_tokens: LengthSpec
    shared_prefix: SharedPrefix | None = None

    def build(
        self, *, seed: int, vocab_size: int, exit_trace: Sequence[int] | None = None
    ) -> StaticSource:
        return rate_source(self, 1.0, seed=seed, vocab_size=vocab_size, exit_trace=exit_trace)


class GammaWorkload(StrictModel):
    """Gamma-distributed gaps with shape ``burstiness`` (1.0 = Poisson, < 1 burstier)."""

    kind: Literal["gamma"]
    num_requests: Count
    request_rate: float = Field(ge=MIN_REQUEST_RATE, allow_inf_nan=False)
    burstiness: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    prompt_tokens: LengthSpec
    output_tokens: LengthSpec
    shared_prefix: SharedPrefix | None = None

    def build(
        self, *, seed: int, vocab_size: int, exit_trace: Sequence[int] | None = None
    ) -> StaticSource:
        return rate_source(self, self.burstiness, seed=seed, vocab_size=vocab_size,
                           exit_trace=exit_trace)
