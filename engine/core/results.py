"""Typed executor results and the records both drivers log (DESIGN.md §7)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.batch import Batch
from engine.core.request import Stage


@dataclass(frozen=True, slots=True)
class StepResult:
    """Base result: PRELUDE and atomic PREFILL return nothing else."""

    step_id: int


@dataclass(frozen=True, slots=True)
class RecurrentResult(StepResult):
    """One signal per DECODE item in item order, or None when no decode item needs one."""

    decode_signals: tuple[float, ...] | None = None


@dataclass(frozen=True, slots=True)
class CodaResult(StepResult):
    """One sampled token id per CODA item in item order."""

    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """An output token produced by a CODA step."""

    request_id: str
    index: int
    time_s: float
    token_id: int
    exit_depth: int  # loops the token ran, 1..D; the first token is always D
    finished: bool = False
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One executed batch, as both drivers log it (one row of steps.csv)."""

    step: int
    start_s: float
    end_s: float
    stage: str
    kind: str
    core_calls: int
    num_decode_items: int
    num_prompt_items: int
    num_prompt_tokens: int
    num_fused_prelude_items: int
    depths: str
    mixed: bool

    @classmethod
    def from_batch(cls, batch: Batch, start_s: float, end_s: float) -> StepRecord:
        return cls(
            step=batch.step_id,
            start_s=start_s,
            end_s=end_s,
            stage=batch.stage.value,
            kind=batch.kind_label,
            core_calls=batch.core_calls,
            num_decode_items=batch.num_decode_items,
            num_prompt_items=batch.num_prompt_items,
            num_prompt_tokens=batch.num_prompt_tokens,
            num_fused_prelude_items=batch.num_fused_prelude_items,
            depths=";".join(f"{d}:{n}" for d, n in batch.depth_counts().items()),
            mixed=batch.is_mixed,
        )


def result_matches(batch: Batch, result: StepResult) -> bool:
    """Shape check: the result type and lengths fit the batch."""
    if result.step_id != batch.step_id:
        return False
    if batch.stage is Stage.CODA:
        return isinstance(result, CodaResult) and len(result.token_ids) == len(batch.items)
    if batch.stage is Stage.RECURRENT:
        if not isinstance(result, RecurrentResult):
            return False
        if result.decode_signals is None:
            return True
        return len(result.decode_signals) == batch.num_decode_items
    return True
