"""The step contract: what ``schedule`` hands an executor (DESIGN.md §7)."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field

from engine.core.request import PromptItem, PromptStateHandle, Stage


class ItemKind(enum.Enum):
    DECODE = "DECODE"
    PROMPT = "PROMPT"


@dataclass(frozen=True, slots=True)
class ScheduledItem:
    """One request's work in a batch, snapshotted when scheduled.

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


@dataclass(frozen=True, slots=True)
class Batch:
    """A scheduled step. Rows: decode items first, then each prompt item's rows contiguously."""

    step_id: int
    stage: Stage
    items: tuple[ScheduledItem, ...]
    housekeeping: Housekeeping = field(default_factory=Housekeeping)

    @property
    def num_decode_items(self) -> int:
        return sum(1 for it in self.items if it.kind is ItemKind.DECODE)

    @property
    def num_prompt_items(self) -> int:
        return sum(1 for it in self.items if it.kind is ItemKind.PROMPT)

    @property
    def num_prompt_tokens(self) -> int:
        return sum(it.num_tokens for it in self.items if it.kind is ItemKind.PROMPT)

    @property
    def num_rows(self) -> int:
        return sum(it.num_tokens for it in self.items)

    @property
    def num_fused_prelude_items(self) -> int:
        return sum(1 for it in self.items if it.fused_prelude)

    @property
    def is_mixed(self) -> bool:
        kinds = {it.kind for it in self.items}
        return self.stage is Stage.RECURRENT and len(kinds) == 2

    @property
    def core_calls(self) -> int:
        """Recurrent-core traversals this step costs (0 for PRELUDE and CODA)."""
        if self.stage not in (Stage.PREFILL, Stage.RECURRENT):
            return 0
        return max((it.num_depths for it in self.items), default=0)

    @property
    def needs_signals(self) -> bool:
        return any(it.needs_signal for it in self.items)

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
