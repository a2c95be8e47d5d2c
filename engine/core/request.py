"""Requests, their status and stage, and per-depth prompt work items."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.core.config import ExitConfig

if TYPE_CHECKING:
    from engine.core.exits import ExitDecider
    from engine.core.kv_allocation import Allocation

# vLLM's default cap on the top log-probabilities a request may ask for per token.
MAX_LOGPROBS = 20


class RequestStatus(enum.Enum):
    """Where a request is in its life (vLLM's names).

    WAITING: queued for admission. WAITING_FOR_REMOTE_KVS: admitted with its KV blocks
    claimed while its prompt's KV arrives from a prefill worker (``kv_handoff``); in no stage
    queue until it lands. RUNNING: admitted; ``Request.stage`` says where its next item runs.
    FINISHED: done, for any reason.
    """

    WAITING = "WAITING"
    WAITING_FOR_REMOTE_KVS = "WAITING_FOR_REMOTE_KVS"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"


class Stage(enum.Enum):
    """The stage a batch runs, and the stage of a running request's next item.

    PREFILL: prompt work (a request's prompt items; under the mixed arm they ride in a
    RECURRENT batch). PRELUDE: embed the sampled token. RECURRENT: one depth of the shared
    layer stack. CODA: the LM head and sampling.
    """

    PREFILL = "PREFILL"
    PRELUDE = "PRELUDE"
    RECURRENT = "RECURRENT"
    CODA = "CODA"


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request generation settings (vLLM's names and meanings).

    ``exit`` overrides the engine's default exit config; ``exit_trace`` gives one exit depth
    per output token for ``trace`` mode (the first entry must equal the model's depth).

    ``logprobs`` asks for the chosen token's log-probability and the ``logprobs`` most
    likely ones per token (0: the chosen one only; at most ``MAX_LOGPROBS``), from the raw
    logits of the depth the token exited at. ``min_tokens`` keeps EOS and ``stop_token_ids``
    from being sampled before that many tokens. Penalties follow vLLM: ``presence_penalty``
    and ``frequency_penalty`` subtract from the logits of tokens already generated (once, and
    per occurrence); ``repetition_penalty`` divides positive (multiplies negative) logits of
    tokens in the prompt or the output. ``n`` and ``stop`` strings are carried for the
    front ends (``engine.parallel_sampling``, ``engine.text_stream``); the core itself runs
    one sample per request and never sees text.
    """

    max_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    eos_token_id: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    exit: ExitConfig | None = None
    exit_trace: tuple[int, ...] | None = None
    n: int = 1
    logprobs: int | None = None
    stop: tuple[str, ...] = ()
    min_tokens: int = 0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(
                f"sampling.max_tokens: must be an integer >= 1, got {self.max_tokens!r}")
        if not self.temperature >= 0 or math.isinf(self.temperature):
            raise ValueError(f"sampling.temperature: must be >= 0, got {self.temperature!r}")
        if self.top_k < 0:
            raise ValueError(f"sampling.top_k: must be >= 0 (0 = off), got {self.top_k!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"sampling.top_p: must be in (0, 1], got {self.top_p!r}")
        self._check_extensions()

    def _check_extensions(self) -> None:
        if self.n < 1:
            raise ValueError(f"sampling.n: must be >= 1, got {self.n!r}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise ValueError(
                f"sampling.logprobs: must be in [0, {MAX_LOGPROBS}], got {self.logprobs!r}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"sampling.min_tokens: must be in [0, max_tokens "
                             f"{self.max_tokens}], got {self.min_tokens!r}")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not -2.0 <= value <= 2.0:
                raise ValueError(f"sampling.{name}: must be in [-2, 2], got {value!r}")
        if not 0.0 < self.repetition_penalty <= 2.0:
            raise ValueError("sampling.repetition_penalty: must be in (0, 2], got "
                             f"{self.repetition_penalty!r}")
        if any(not s for s in self.stop):
            raise ValueError("sampling.stop: empty stop string; remove it")

    @property
    def has_penalties(self) -> bool:
        """Whether the sampler must look at the request's tokens so far."""
        return (self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
                or self.repetition_penalty != 1.0)


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """The log-probability of a sampled token and the most likely tokens at its position
    (``top``: (token id, log-probability), most likely first)."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class PromptStateHandle:
    """Opaque reference to runner-owned prompt hidden state; records its owner."""

    handle_id: int
    request_id: str
    generation: int


@dataclass(slots=True)
class PromptItem:
    """One chunk of a request's prompt advancing one depth per core call (RFC §1)."""

    token_start: int
    token_count: int
    depth: int = 0
    embedded: bool = False
    state: PromptStateHandle | None = None

    @property
    def token_end(self) -> int:
        return self.token_start + self.token_count


@dataclass(slots=True, eq=False)
class Request:
    """A request as the core tracks it. Mutated only by the core."""

    request_id: str
    prompt_token_ids: tuple[int, ...]  # shared with the caller's tuple, never copied
    params: SamplingParams
    arrival_s: float
    priority: int = 0
    generation: int = 0
    status: RequestStatus = RequestStatus.WAITING
    stage: Stage = Stage.PREFILL  # meaningful while RUNNING
    exit: ExitConfig = field(default_factory=ExitConfig)
    decider: ExitDecider | None = None
    num_prefilled_tokens: int = 0
    # Prefix caching: chained hashes of the full prompt blocks (computed once, at arrival)
    # and how many prompt tokens admission found cached.
    block_hashes: list[bytes] = field(default_factory=list)
    num_cached_tokens: int = 0
    prompt_item: PromptItem | None = None
    # The wavefront arm's chunks in flight (started, not finalized), in chunk order; their
    # depths strictly decrease. The other arms keep their one chunk in ``prompt_item``.
    prompt_chunks: list[PromptItem] = field(default_factory=list)
    # Depths the current token has run: the next decode depth (zero-based), D once done.
    num_depths_done: int = 0
    # RoPE position of the token now in the loop (decode) or the next prompt token (prefill);
    # kept as a field because the scheduler reads it for every row of every step.
    position: int = 0
    output_token_ids: list[int] = field(default_factory=list)
    exit_depths: list[int] = field(default_factory=list)
    # One entry per output token when params.logprobs is set, else empty.
    output_logprobs: list[TokenLogprobs] = field(default_factory=list)
    admitted_seq: int = -1
    arrival_seq: int = -1
    bypassed: int = 0
    first_token_s: float | None = None
    finish_s: float | None = None
    finish_reason: str | None = None
    error: str | None = None  # why a failed batch finished it (finish_reason "error")
    admitted_s: float | None = None
    # The KV the block manager holds for it while it runs; the per-row paths read it
    # instead of looking it up by (request_id, generation).
    kv: Allocation | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    def finish_reason_after(self, token_id: int) -> str | None:
        """Why the request ends with its newest output token ``token_id``, or None."""
        p = self.params
        eos = p.eos_token_id
        # Before min_tokens the sampler never picks these; a forced token does not stop.
        if (not p.ignore_eos and self.num_output_tokens > p.min_tokens
                and ((eos is not None and token_id == eos)
                     or (p.stop_token_ids and token_id in p.stop_token_ids))):
            return "stop"
        if self.num_output_tokens >= p.max_tokens:
            return "length"
        return None

    @property
    def lifetime_tokens(self) -> int:
        """Positions this request can ever write: prompt + all but the last output token."""
        return self.num_prompt_tokens + self.params.max_tokens - 1


def frozen_ids(token_ids: Sequence[int]) -> tuple[int, ...]:
    """``token_ids`` as a tuple: a tuple as it is (a queued request shares its workload's
    ids instead of a copy per request), anything else copied into one."""
    return token_ids if isinstance(token_ids, tuple) else tuple(token_ids)
