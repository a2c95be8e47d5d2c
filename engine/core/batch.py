"""The step contract: what ``schedule`` hands an executor (docs/design.md)."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from engine.core.prompt_state import PromptStateHandles
from engine.core.request import PromptItem, PromptStateHandle, SamplingParams, Stage


class ItemKind(enum.Enum):
    DECODE = "DECODE"
    PROMPT = "PROMPT"


@dataclass(slots=True, eq=False, init=False)
class ScheduledItem:
    """One request's work in a batch, snapshotted when scheduled; read-only by contract
    (not frozen, because frozen dataclasses cost 4x to build on the hot path).

    ``depth`` is the first depth this item runs and ``num_depths`` how many consecutive depths
    it runs inside this step (1, except an atomic PREFILL chunk or a prompt shortcut).
    PRELUDE and CODA items run no depth. For a PROMPT item the snapshot fields equal its
    ``PromptItem`` at scheduling time; ``token_ids`` are present only when the executor must
    embed them (PRELUDE, fused prelude, atomic PREFILL).
    """

    request_id: str
    generation: int
    kind: ItemKind
    position: int
    num_tokens: int
    depth: int = 0
    num_depths: int = 1
    needs_signal: bool = False
    fused_prelude: bool = False
    token_ids: tuple[int, ...] = ()
    prompt_state: PromptStateHandle | None = None
    prompt_item: PromptItem | None = None
    is_last_chunk: bool = False
    # DECODE items needing a signal: which head produces it ("gate" or "lookahead").
    signal_head: str = "gate"
    # CODA items: the request's sampling params and the output index being sampled.
    params: SamplingParams | None = None
    output_index: int = 0

    # Written out (init=False): built per row per step (engine/_native.py, requirement 1).
    def __init__(
        self,
        request_id: str,
        generation: int,
        kind: ItemKind,
        position: int,
        num_tokens: int,
        depth: int = 0,
        num_depths: int = 1,
        needs_signal: bool = False,
        fused_prelude: bool = False,
        token_ids: tuple[int, ...] = (),
        prompt_state: PromptStateHandle | None = None,
        prompt_item: PromptItem | None = None,
        is_last_chunk: bool = False,
        signal_head: str = "gate",
        params: SamplingParams | None = None,
        output_index: int = 0,
    ) -> None:
        self.request_id = request_id
        self.generation = generation
        self.kind = kind
        self.position = position
        self.num_tokens = num_tokens
        self.depth = depth
        self.num_depths = num_depths
        self.needs_signal = needs_signal
        self.fused_prelude = fused_prelude
        self.token_ids = token_ids
        self.prompt_state = prompt_state
        self.prompt_item = prompt_item
        self.is_last_chunk = is_last_chunk
        self.signal_head = signal_head
        self.params = params
        self.output_index = output_index

    @property
    def key(self) -> tuple[str, int]:
        return (self.request_id, self.generation)


@dataclass(slots=True, init=False)
class FinalizeOp:
    """Copy an exited decode token's K/V (all layers, one position) into deeper planes.
    Read-only by contract."""

    request_id: str
    generation: int
    position: int
    from_depth: int  # the last depth the token ran (zero-based)
    to_depths: tuple[int, ...]

    # Written out (init=False): built per exited token (engine/_native.py, requirement 1).
    def __init__(
        self, request_id: str, generation: int, position: int, from_depth: int,
        to_depths: tuple[int, ...],
    ) -> None:
        self.request_id = request_id
        self.generation = generation
        self.position = position
        self.from_depth = from_depth
        self.to_depths = to_depths


@dataclass(slots=True, init=False)
class Housekeeping:
    """Runner-side work accumulated since the last batch, applied before executing it.
    Read-only by contract (``EMPTY_HOUSEKEEPING`` is shared); not frozen, as frozen
    initialisers cost twice as much."""

    finalize: tuple[FinalizeOp, ...] = ()
    released_handles: tuple[PromptStateHandle, ...] = ()
    released_requests: tuple[tuple[str, int], ...] = ()

    # Written out (init=False): built for every step that carries an exited token's copy
    # (engine/_native.py, requirement 1).
    def __init__(
        self,
        finalize: tuple[FinalizeOp, ...] = (),
        released_handles: tuple[PromptStateHandle, ...] = (),
        released_requests: tuple[tuple[str, int], ...] = (),
    ) -> None:
        self.finalize = finalize
        self.released_handles = released_handles
        self.released_requests = released_requests

    def __bool__(self) -> bool:
        return bool(self.finalize or self.released_handles or self.released_requests)


EMPTY_HOUSEKEEPING: Final = Housekeeping()  # shared: most steps carry none


class PendingHousekeeping:
    """Accumulates housekeeping until the next batch takes it (``take``); a failed batch's
    goes back in front (``redeliver``), since the executor may not have applied it."""

    def __init__(self, prompt_states: PromptStateHandles) -> None:
        self.prompt_states = prompt_states
        self.finalize: list[FinalizeOp] = []
        self.released_requests: list[tuple[str, int]] = []

    def take(self) -> Housekeeping:
        """Everything pending, emptied; the shared empty one when nothing is."""
        released = self.prompt_states.take_released()
        if not (self.finalize or released or self.released_requests):
            return EMPTY_HOUSEKEEPING
        if self.released_requests:
            gone = set(self.released_requests)
            # A request that finished right after its exiting token needs no finalize copy.
            finalize = tuple(
                op for op in self.finalize if (op.request_id, op.generation) not in gone)
        else:
            finalize = tuple(self.finalize)
        hk = Housekeeping(finalize, released, tuple(self.released_requests))
        self.finalize.clear()
        self.released_requests.clear()
        return hk

    def redeliver(self, hk: Housekeeping) -> None:
        """Hand ``hk`` over again with the next batch, before anything pending since."""
        self.finalize[:0] = hk.finalize
        self.released_requests[:0] = hk.released_requests
        self.prompt_states.redeliver(hk.released_handles)


@dataclass(slots=True, eq=False, init=False)
class Batch:
    """A scheduled step. Rows: decode items first, then each prompt item's rows contiguously.

    Read-only by contract; the counts are computed once when the batch is built.
    """

    step: int
    stage: Stage
    items: tuple[ScheduledItem, ...]
    housekeeping: Housekeeping
    num_decode_items: int
    num_prompt_items: int
    num_prompt_tokens: int
    num_fused_prelude_items: int
    needs_signals: bool
    num_core_calls: int
    """Recurrent-core traversals this step costs (0 for PRELUDE and CODA)."""

    def __init__(
        self,
        step: int,
        stage: Stage,
        items: tuple[ScheduledItem, ...],
        housekeeping: Housekeeping | None = None,
    ) -> None:
        self.step = step
        self.stage = stage
        self.items = items
        self.housekeeping = EMPTY_HOUSEKEEPING if housekeeping is None else housekeeping
        num_decode = num_prompt = num_prompt_tokens = num_fused = num_core_calls = 0
        needs_signals = False
        if stage is Stage.PRELUDE or stage is Stage.CODA:
            num_decode = len(items)  # one row each, no core call
        else:
            for it in items:
                if it.kind is ItemKind.DECODE:
                    num_decode += 1
                else:
                    num_prompt += 1
                    num_prompt_tokens += it.num_tokens
                if it.fused_prelude:
                    num_fused += 1
                if it.needs_signal:
                    needs_signals = True
                if it.num_depths > num_core_calls:
                    num_core_calls = it.num_depths
        self.num_decode_items = num_decode
        self.num_prompt_items = num_prompt
        self.num_prompt_tokens = num_prompt_tokens
        self.num_fused_prelude_items = num_fused
        self.needs_signals = needs_signals
        self.num_core_calls = num_core_calls

    @property
    def num_rows(self) -> int:
        return self.num_decode_items + self.num_prompt_tokens

    @property
    def is_mixed(self) -> bool:
        return (
            self.stage is Stage.RECURRENT
            and self.num_decode_items > 0
            and self.num_prompt_items > 0
        )

    def depth_counts(self) -> dict[int, int]:
        """Item count per depth over every core call of the step."""
        counts: list[int] = []  # by depth: a list, as this runs once per recorded step
        for it in self.items:
            end = it.depth + it.num_depths
            if end > len(counts):
                counts.extend([0] * (end - len(counts)))
            for d in range(it.depth, end):
                counts[d] += 1
        return {d: n for d, n in enumerate(counts) if n}

    def core_call_items(self) -> Iterator[list[tuple[ScheduledItem, int]]]:
        """Per core call of this step, the (item, depth) pairs that run in it, in row order."""
        for k in range(self.num_core_calls):
            yield [(it, it.depth + k) for it in self.items if k < it.num_depths]
