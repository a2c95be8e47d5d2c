"""Shared pieces of every workload: length distributions, arrival processes, synthetic prompt
ids, and the ``ArrivalSource`` the drivers consume.

Determinism: every draw comes from ``np.random.default_rng`` seeded by the run's seed; prompt
token ids come from a separate stream per request (seed, request index), so the same seed
gives the same arrivals, lengths and prompts, whatever the arm.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.core.records import ArrivalSpec
from engine.core.request import SamplingParams
from engine.core.results import TokenEvent

_PROMPT_STREAM = 0x70726F6D  # "prom": keeps prompt ids apart from the length/arrival stream
_PREFIX_STREAM = 0x70726678  # "prfx": shared prefixes' ids
_CHOICE_STREAM = 0x63686F73  # "chos": which prefix a request starts with


# Upper bounds: past them a run cannot fit in memory, or means nothing.
MAX_REQUEST_TOKENS = 1 << 20  # one prompt or output: 1M tokens, past every supported context
MAX_REQUESTS = 10_000_000  # requests of one run
MAX_NUM_SEQS = 1 << 16  # requests running at once (scheduler.max_num_seqs, decoders)
MAX_LOGNORMAL_SIGMA = 10.0
# the slowest arrival rate: one request per ~11.6 days keeps simulated times (float s) at
# microsecond resolution over a run and the per-second series of a run short
MIN_REQUEST_RATE = 1e-6
Tokens = Annotated[int, Field(ge=1, le=MAX_REQUEST_TOKENS)]
Count = Annotated[int, Field(ge=1, le=MAX_REQUESTS)]


class StrictModel(BaseModel):
    """Unknown keys and wrong types are errors (an int still fills a float field); ``.inf``
    and ``.nan`` are refused in every number field."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class FixedLength(StrictModel):
    """Always ``value`` tokens."""

    dist: Literal["fixed"]
    value: Tokens


class UniformLength(StrictModel):
    """Uniform integer in [low, high]."""

    dist: Literal["uniform"]
    low: Tokens
    high: Tokens

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.low > self.high:
            raise ValueError(f"low {self.low} exceeds high {self.high}; set low <= high")
        return self


class LognormalLength(StrictModel):
    """exp(N(ln median, sigma)), rounded to an integer and clipped to [min, max]."""

    dist: Literal["lognormal"]
    median: float = Field(gt=0, le=MAX_REQUEST_TOKENS)
    # exp(N(0, sigma)) past sigma 10 spans more than 10^40 within three sigmas: no length
    # distribution, and the draws overflow
    sigma: float = Field(ge=0, le=MAX_LOGNORMAL_SIGMA)
    min: int = Field(default=1, ge=1, le=MAX_REQUEST_TOKENS)
    max: Tokens

    @model_validator(mode="after")
    def _ordered(self) -> LognormalLength:
        if self.min > self.max:
            raise ValueError(f"min {self.min} exceeds max {self.max}; set min <= max")
        return self


LengthDist = Annotated[FixedLength | UniformLength | LognormalLength, Field(discriminator="dist")]
LengthSpec = Tokens | LengthDist


def length_max(spec: int | FixedLength | UniformLength | LognormalLength) -> int:
    """The largest length ``spec`` can draw."""
    if isinstance(spec, int):
        return spec
    if isinstance(spec, FixedLength):
        return spec.value
    if isinstance(spec, UniformLength):
        return spec.high
    return spec.max


def sample_lengths(
    spec: int | FixedLength | UniformLength | LognormalLength, n: int, rng: np.random.Generator
) -> list[int]:
    """``n`` token counts drawn from ``spec`` (a plain int means fixed)."""
    if isinstance(spec, int):
        return [spec] * n
    if isinstance(spec, FixedLength):
        return [spec.value] * n
    if isinstance(spec, UniformLength):
        return [int(x) for x in rng.integers(spec.low, spec.high + 1, size=n)]
    draws = np.exp(rng.normal(math.log(spec.median), spec.sigma, size=n))
    return [int(x) for x in np.clip(np.rint(draws), spec.min, spec.max)]


def arrival_times(
    n: int, request_rate: float, burstiness: float, rng: np.random.Generator
) -> list[float]:
    """Arrival times (s) of ``n`` requests: the first at 0, then gamma-distributed gaps with
    mean 1 / request_rate and shape ``burstiness`` (1.0 is a Poisson process, below 1 is
    burstier, above 1 more regular), as vLLM's benchmark draws them."""
    if burstiness == 1.0:
        gaps = rng.exponential(1.0 / request_rate, size=n)
    else:
        gaps = rng.gamma(burstiness, 1.0 / (request_rate * burstiness), size=n)
    times = np.concatenate(([0.0], np.cumsum(gaps[: n - 1])))
    return [float(t) for t in times]


# A sweep redraws the same prompts at every point (the lengths do not depend on the rate), and
# planning draws them once more: a bounded memo of recent prompts (immutable tuples).
@functools.lru_cache(maxsize=4096)
def prompt_ids(seed: int, index: int, num_tokens: int, vocab_size: int) -> tuple[int, ...]:
    """Synthetic prompt token ids of request ``index``: its own seeded stream."""
    rng = np.random.default_rng([seed, _PROMPT_STREAM, index])
    return shared_ints(rng.integers(0, vocab_size, size=num_tokens), vocab_size)


@functools.cache
def _ints(vocab_size: int) -> tuple[int, ...]:
    return tuple(range(vocab_size))


def shared_ints(ids: np.ndarray, vocab_size: int) -> tuple[int, ...]:
    """``ids`` as a tuple of one shared int object per token id: a 100k-request workload
    holds tens of millions of prompt ids, 8 bytes each this way instead of about 36."""
    ints = _ints(vocab_size)
    return tuple(map(ints.__getitem__, ids.tolist()))


class SharedPrefix(StrictModel):
    """The first ``tokens`` positions of each prompt come from one of ``num_prefixes`` shared
    prefixes (a system prompt, few-shot examples), picked per request from a seeded stream;
    the rest of the prompt, and every length, stays what it is without the option."""

    tokens: Tokens
    num_prefixes: int = Field(default=1, ge=1, le=MAX_REQUESTS)

    def apply(
        self, prompt: Sequence[int], *, seed: int, index: int, vocab_size: int
    ) -> tuple[int, ...]:
        """``prompt`` (request ``index``'s own ids) with its head replaced by its prefix."""
        choice = int(np.random.default_rng([seed, _CHOICE_STREAM, index]).integers(
            self.num_prefixes))
        rng = np.random.default_rng([seed, _PREFIX_STREAM, choice])
        prefix = rng.integers(0, vocab_size, size=min(self.tokens, len(prompt)))
        return (*shared_ints(prefix, vocab_size), *prompt[len(prefix):])


def with_prefix(
    shared: SharedPrefix | None, prompt: tuple[int, ...], *, seed: int, index: int,
    vocab_size: int,
) -> tuple[int, ...]:
    """``prompt`` unchanged without a shared-prefix option, else ``shared.apply``."""
    if shared is None:
        return prompt
    return shared.apply(prompt, seed=seed, index=index, vocab_size=vocab_size)


def request_trace(
    output_tokens: int, own: Sequence[int] | None, exit_trace: Sequence[int] | None
) -> tuple[int, ...] | None:
    """The exit-depth trace of a request: its own (from a trace file) or the run-wide
    ``exit_trace`` pattern, whose entries after the first repeat to cover every token."""
    if own is not None:
        return tuple(own)
    if not exit_trace:
        return None
    head, tail = exit_trace[0], list(exit_trace[1:]) or [exit_trace[0]]
    return (head, *(tail[i % len(tail)] for i in range(output_tokens - 1)))


def sampling_params(
    output_tokens: int, exit_trace: tuple[int, ...] | None = None
) -> SamplingParams:
    """Every workload request: exactly ``output_tokens`` tokens (EOS ignored)."""
    return SamplingParams(max_tokens=output_tokens, ignore_eos=True, exit_trace=exit_trace)


class StaticSource:
    """An ``ArrivalSource`` over precomputed specs.

    ``timed`` arrive at their ``arrival_s``; ``triggers[(request_id, index)]`` arrive when that
    request emits output token ``index``. Stateless, so one source can serve several runs.
    """

    def __init__(
        self,
        timed: Sequence[ArrivalSpec],
        triggers: Mapping[tuple[str, int], Sequence[ArrivalSpec]] | None = None,
    ) -> None:
        self.timed = sorted(timed, key=lambda s: s.arrival_s or 0.0)
        self.triggers = {k: tuple(v) for k, v in (triggers or {}).items()}

    def initial(self) -> list[ArrivalSpec]:
        return list(self.timed)

    def on_token(self, event: TokenEvent) -> list[ArrivalSpec]:
        if not self.triggers:
            return []
        return list(self.triggers.get((event.request_id, event.index), ()))

    def triggers_on_tokens(self) -> bool:
        return bool(self.triggers)

    def all_specs(self) -> list[ArrivalSpec]:
        """Every request the source can submit, timed first."""
        return [*self.timed, *(s for specs in self.triggers.values() for s in specs)]
