"""Typed executor results and the records both drivers log (docs/design.md)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.batch import Batch, ItemKind
from engine.core.request import Stage, TokenLogprobs

# The classes below are built once per step or per token: their __init__ is written out
# (init=False; engine/_native.py, requirement 1). They are read-only by contract rather than
# frozen, since frozen initialisers cost twice as much.


@dataclass(slots=True, init=False)
class StepResult:
    """Base result: PRELUDE and atomic PREFILL return nothing else."""

    step: int

    def __init__(self, step: int) -> None:
        self.step = step


@dataclass(slots=True, init=False)
class RecurrentResult(StepResult):
    """One signal per DECODE item in item order, or None when no decode item needs one."""

    decode_signals: tuple[float, ...] | None

    def __init__(self, step: int, decode_signals: tuple[float, ...] | None = None) -> None:
        self.step = step
        self.decode_signals = decode_signals


@dataclass(slots=True, init=False)
class CodaResult(StepResult):
    """One sampled token id per CODA item in item order; ``logprobs`` one entry per item
    (None for items that did not ask), or None when no item asked."""

    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprobs | None, ...] | None

    def __init__(
        self, step: int, token_ids: tuple[int, ...] = (),
        logprobs: tuple[TokenLogprobs | None, ...] | None = None,
    ) -> None:
        self.step = step
        self.token_ids = token_ids
        self.logprobs = logprobs


@dataclass(slots=True, init=False)
class TokenEvent:
    """An output token produced by a CODA step."""

    request_id: str
    index: int
    time_s: float
    token_id: int
    exit_depth: int  # depths the token ran, 1..D; the first token always runs all D
    finished: bool
    finish_reason: str | None
    logprobs: TokenLogprobs | None

    def __init__(
        self, request_id: str, index: int, time_s: float, token_id: int, exit_depth: int,
        finished: bool = False, finish_reason: str | None = None,
        logprobs: TokenLogprobs | None = None,
    ) -> None:
        self.request_id = request_id
        self.index = index
        self.time_s = time_s
        self.token_id = token_id
        self.exit_depth = exit_depth
        self.finished = finished
        self.finish_reason = finish_reason
        self.logprobs = logprobs


@dataclass(slots=True, init=False)
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
    num_readbacks: int  # device -> host readbacks: measured by a runner, else RFC §4's count
    max_prompt_items_per_request: int  # above 1 only under the wavefront arm

    def __init__(
        self, step: int, start_s: float, end_s: float, stage: str, kind: str, core_calls: int,
        num_decode_items: int, num_prompt_items: int, num_prompt_tokens: int,
        num_fused_prelude_items: int, depths: str, mixed: bool, num_readbacks: int = 0,
        max_prompt_items_per_request: int = 0,
    ) -> None:
        self.step = step
        self.start_s = start_s
        self.end_s = end_s
        self.stage = stage
        self.kind = kind
        self.core_calls = core_calls
        self.num_decode_items = num_decode_items
        self.num_prompt_items = num_prompt_items
        self.num_prompt_tokens = num_prompt_tokens
        self.num_fused_prelude_items = num_fused_prelude_items
        self.depths = depths
        self.mixed = mixed
        self.num_readbacks = num_readbacks
        self.max_prompt_items_per_request = max_prompt_items_per_request

    @classmethod
    def from_batch(
        cls, batch: Batch, start_s: float, end_s: float, depths: str | None = None,
        num_readbacks: int | None = None,
    ) -> StepRecord:
        """The row of ``batch``; ``depths`` may be given already formatted (a recorder
        memoises it), else it is built from ``Batch.depth_counts``; ``num_readbacks`` as a
        runner counted them, else the count RFC §4 allows (``rfc_readbacks``)."""
        if depths is None:
            depths = depths_text(batch.depth_counts())
        return cls(
            batch.step, start_s, end_s, stage_name(batch.stage), step_kind(batch),
            batch.num_core_calls, batch.num_decode_items, batch.num_prompt_items,
            batch.num_prompt_tokens, batch.num_fused_prelude_items, depths, batch.is_mixed,
            rfc_readbacks(batch) if num_readbacks is None else num_readbacks,
            max_prompt_items_per_request(batch),
        )


def max_prompt_items_per_request(batch: Batch) -> int:
    """The most prompt items one request holds in ``batch``: one per request except under
    the wavefront arm, whose items of one request sit next to each other."""
    if batch.num_prompt_items < 2:
        return batch.num_prompt_items
    best = run = 0
    prev = ""
    for it in batch.items:
        if it.kind is ItemKind.PROMPT:
            run = run + 1 if it.request_id == prev else 1
            prev = it.request_id
            if run > best:
                best = run
    return best


def rfc_readbacks(batch: Batch) -> int:
    """Device -> host readbacks RFC §4 allows a step: one for a CODA step's sampled
    tokens, one for a recurrent step whose decode rows need an exit signal, else none (the
    simulator records this; a real runner records what it did)."""
    if not batch.items:
        return 0
    if batch.stage is Stage.CODA:
        return 1
    return 1 if batch.stage is Stage.RECURRENT and batch.needs_signals else 0


def stage_name(stage: Stage) -> str:
    """``stage.value`` by identity: compiled, an enum's ``value`` is a Python property call
    per step."""
    if stage is Stage.RECURRENT:
        return "RECURRENT"
    if stage is Stage.CODA:
        return "CODA"
    if stage is Stage.PRELUDE:
        return "PRELUDE"
    if stage is Stage.PREFILL:
        return "PREFILL"
    return str(stage.value)


STEP_KINDS = ("prelude", "coda", "prefill", "mixed", "decode", "prompt")
# The stage name of each step kind: a step's kind determines its stage.
STEP_KIND_STAGES = ("PRELUDE", "CODA", "PREFILL", "RECURRENT", "RECURRENT", "RECURRENT")


def step_kind_index(batch: Batch) -> int:
    """``step_kind(batch)``'s index in ``STEP_KINDS``."""
    stage = batch.stage
    if stage is Stage.PRELUDE:
        return 0
    if stage is Stage.CODA:
        return 1
    if stage is Stage.PREFILL:
        return 2
    if batch.num_prompt_items == 0:
        return 4
    return 3 if batch.num_decode_items > 0 else 5  # a RECURRENT step with both is mixed


def step_kind(batch: Batch) -> str:
    """The steps.csv ``kind`` of a batch, which calibrated profiles also price by:
    decode | prompt | mixed | prefill | prelude | coda."""
    return STEP_KINDS[step_kind_index(batch)]


def depths_text(counts: dict[int, int]) -> str:
    """``Batch.depth_counts`` as steps.csv writes it: "0:3;1:2"."""
    return ";".join(f"{d}:{n}" for d, n in counts.items())


def result_matches(batch: Batch, result: StepResult) -> bool:
    """Shape check: the result type and lengths fit the batch."""
    if result.step != batch.step:
        return False
    if batch.stage is Stage.CODA:
        return isinstance(result, CodaResult) and len(result.token_ids) == len(batch.items) and (
            result.logprobs is None or len(result.logprobs) == len(batch.items))
    if batch.stage is Stage.RECURRENT:
        if not isinstance(result, RecurrentResult):
            return False
        if result.decode_signals is None:
            return True
        return len(result.decode_signals) == batch.num_decode_items
    return True
