"""The interference workload (RFC §6): a decode population with long prompts injected at
fixed points of decode progress, identical in every arm.

Decoders ``decode-0 .. decode-{N-1}`` arrive at t = 0. Injection j (``inject-j``) arrives
when ``decode-0`` emits its output token with index ``at_decode_tokens`` (0-based), so every
arm sees the same prompt load at the same decode progress, whatever its timing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from engine.core.records import ArrivalSpec
from loopserve.workloads.base import (
    MAX_NUM_SEQS,
    SharedPrefix,
    StaticSource,
    StrictModel,
    Tokens,
    prompt_ids,
    request_trace,
    sampling_params,
    with_prefix,
)

TRIGGER_REQUEST = "decode-0"


class Injection(StrictModel):
    """One injected prompt."""

    at_decode_tokens: int = Field(ge=0)
    prompt_tokens: Tokens
    output_tokens: Tokens = 16


class InterferenceWorkload(StrictModel):
    """A steady decode population plus prompts injected at decode-progress points."""

    kind: Literal["interference"]
    decode_population: int = Field(default=8, ge=1, le=MAX_NUM_SEQS)
    decode_prompt_tokens: Tokens = 64
    decode_output_tokens: Tokens = 512
    inject: list[Injection] = Field(min_length=1, max_length=MAX_NUM_SEQS)
    # Applies to the injected prompts (the decoders' short prompts stay their own).
    shared_prefix: SharedPrefix | None = None

    @model_validator(mode="after")
    def _reachable(self) -> InterferenceWorkload:
        for i, inj in enumerate(self.inject):
            if inj.at_decode_tokens >= self.decode_output_tokens:
                raise ValueError(
                    f"inject.{i}.at_decode_tokens: {inj.at_decode_tokens} is never reached, "
                    f"{TRIGGER_REQUEST} emits tokens 0..{self.decode_output_tokens - 1}; "
                    f"set it below decode_output_tokens"
                )
        return self

    def build(
        self, *, seed: int, vocab_size: int, exit_trace: Sequence[int] | None = None
    ) -> StaticSource:
        timed = []
        for i in range(self.decode_population):
            n_out = self.decode_output_tokens
            timed.append(ArrivalSpec(
                f"decode-{i}",
                prompt_ids(seed, i, self.decode_prompt_tokens, vocab_size),
                sampling_params(n_out, request_trace(n_out, None, exit_trace)),
                arrival_s=0.0,
            ))
        triggers: dict[tuple[str, int], list[ArrivalSpec]] = {}
        for j, inj in enumerate(self.inject):
            n_out = inj.output_tokens
            own = prompt_ids(seed, self.decode_population + j, inj.prompt_tokens, vocab_size)
            spec = ArrivalSpec(
                f"inject-{j}",
                with_prefix(self.shared_prefix, own, seed=seed, index=j, vocab_size=vocab_size),
                sampling_params(n_out, request_trace(n_out, None, exit_trace)),
                arrival_s=None,
                injected=True,
            )
            triggers.setdefault((TRIGGER_REQUEST, inj.at_decode_tokens), []).append(spec)
        return StaticSource(timed, triggers)
