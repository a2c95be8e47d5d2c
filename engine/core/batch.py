"""The step contract: what ``schedule`` hands an executor (DESIGN.md §7)."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field

from engine.core.request import PromptItem, PromptStateHandle, SamplingParams, Stage


class ItemKind(enum.Enum):
    DECODE = "DECODE"
    PROMPT = "PROMPT"


@dataclass(slots=True, eq=False)
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

    @property
    def key(self) -> tuple[str, int]:
        return (self.request_id, self.generation)


@dataclass(frozen=True, slots=True)
class FinalizeOp:
    """Copy an exited decode token's K/V (all layers, one position) into deeper planes."""

    request_id: str
    generation: int
    position: int
    from_depth: int  # the last depth the token ran (zero-based)
    to_depths: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Housekeeping:
    """Runner-side work accumulated since the last batch, applied before executing it."""

    finalize: tuple[FinalizeOp, ...] = ()
    released_handles: tuple[PromptStateHandle, ...] = ()
    released_requests: tuple[tuple[str, int], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.finalize or self.released_handles or self.released_requests)


@dataclass(slots=True, eq=False)
class Batch:
    """A scheduled step. Rows: decode items first, then each prompt item's rows contiguously.

    Read-only by contract; the counts are computed once when the batch is built.
    """

    step_id: int
    stage: Stage
    items: tuple[ScheduledItem, ...]
    housekeeping: Housekeeping = field(default_factory=Housekeeping)
    num_decode_items: int = field(init=False, default=0)
    num_prompt_items: int = field(init=False, default=0)
    num_prompt_tokens: int = field(init=False, default=0)
    num_fused_prelude_items: int = field(init=False, default=0)
    needs_signals: bool = field(init=False, default=False)
    core_calls: int = field(init=False, default=0)
    """Recurrent-core traversals this step costs (0 for PRELUDE and CODA)."""

    def __post_init__(self) -> None:
        if self.stage is Stage.PRELUDE or self.stage is Stage.CODA:
            self.num_decode_items = len(self.items)  # one row each, no core call
            return
        runs_core = True
        for it in self.items:
            if it.kind is ItemKind.DECODE:
                self.num_decode_items += 1
            else:
                self.num_prompt_items += 1
                self.num_prompt_tokens += it.num_tokens
            if it.fused_prelude:
                self.num_fused_prelude_items += 1
            if it.needs_signal:
                self.needs_signals = True
            if runs_core and it.num_depths > self.core_calls:
                self.core_calls = it.num_depths

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
        counts: dict[int, int] = {}
        for it in self.items:
            for d in range(it.depth, it.depth + it.num_depths):
                counts[d] = counts.get(d, 0) + 1
        return dict(sorted(counts.items()))

    def core_call_items(self) -> Iterator[list[tuple[ScheduledItem, int]]]:
        """Per core call of this step, the (item, depth) pairs that run in it, in row order."""
        for k in range(self.core_calls):
            yield [(it, it.depth + k) for it in self.items if k < it.num_depths]

    @property
    def kind_label(self) -> str:
        """decode | prompt | mixed | prefill | prelude | coda (for plots and logs)."""
        if self.stage is Stage.PRELUDE:
            return "prelude"
        if self.stage is Stage.CODA:
            return "coda"
        if self.stage is Stage.PREFILL:
            return "prefill"
        if self.is_mixed:
            return "mixed"
        return "decode" if self.num_prompt_items == 0 else "prompt"
