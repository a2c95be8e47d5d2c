"""Requests, their lifecycle stages and per-depth prompt work items."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.core.config import ExitConfig

if TYPE_CHECKING:
    from engine.core.exits import ExitDecider


class Stage(enum.Enum):
    WAITING = "WAITING"
    PREFILL = "PREFILL"
    CODA = "CODA"
    PRELUDE = "PRELUDE"
    RECURRENT = "RECURRENT"
    FINISHED = "FINISHED"


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request generation settings.

    ``exit`` overrides the engine's default exit config; ``exit_trace`` gives one exit depth
    per output token for ``trace`` mode (the first entry must equal the model's depth).
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

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(
                f"sampling.max_tokens: must be an integer >= 1, got {self.max_tokens!r}")
        if self.temperature < 0:
            raise ValueError(f"sampling.temperature: must be >= 0, got {self.temperature!r}")
        if self.top_k < 0:
            raise ValueError(f"sampling.top_k: must be >= 0 (0 = off), got {self.top_k!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"sampling.top_p: must be in (0, 1], got {self.top_p!r}")


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
    stage: Stage = Stage.WAITING
    exit: ExitConfig = field(default_factory=ExitConfig)
    decider: ExitDecider | None = None
    num_prefilled_tokens: int = 0
    # Prefix caching: chained hashes of the full prompt blocks (computed once, at arrival)
    # and how many prompt tokens admission found cached.
    block_hashes: list[bytes] = field(default_factory=list)
    num_cached_tokens: int = 0
    prompt_item: PromptItem | None = None
    loops_done: int = 0
    # RoPE position of the token now in the loop (decode) or the next prompt token (prefill);
    # kept as a field because the scheduler reads it for every row of every step.
    position: int = 0
    output_token_ids: list[int] = field(default_factory=list)
    exit_depths: list[int] = field(default_factory=list)
    admitted_seq: int = -1
    arrival_seq: int = -1
    bypassed: int = 0
    first_token_s: float | None = None
    finish_s: float | None = None
    finish_reason: str | None = None
    error: str | None = None  # why a failed batch finished it (finish_reason "error")
    admitted_s: float | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def lifetime_tokens(self) -> int:
        """Positions this request can ever write: prompt + all but the last output token."""
        return self.num_prompt_tokens + self.params.max_tokens - 1


def frozen_ids(token_ids: Sequence[int]) -> tuple[int, ...]:
    """``token_ids`` as a tuple: a tuple as it is (a queued request shares its workload's
    ids instead of a copy per request), anything else copied into one."""
    return token_ids if isinstance(token_ids, tuple) else tuple(token_ids)
