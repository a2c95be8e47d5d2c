"""Open-loop gamma arrivals: Poisson's mean rate with tunable burstiness."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from loopserve.workloads.base import (
    MIN_REQUEST_RATE,
    Count,
    LengthSpec,
    SharedPrefix,
    StaticSource,
    StrictModel,
)
from loopserve.workloads.poisson import rate_source


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
        return rate_source(
            num_requests=self.num_requests, request_rate=self.request_rate,
            burstiness=self.burstiness, prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens, seed=seed, vocab_size=vocab_size,
            exit_trace=exit_trace, shared_prefix=self.shared_prefix,
        )
