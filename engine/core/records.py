"""What a run submits and records, shared by the SimPy driver and the real-time driver.

A workload is an ``ArrivalSource``: timed arrivals known up front, plus arrivals triggered by
decode progress (the interference workload injects prompts when a decode request reaches a
token index), so every arm sees the same prompt load at the same decode-progress points.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from engine.core.batch import Batch
from engine.core.columns import StepTable, TokenTable
from engine.core.prefix_cache import PrefixCacheStats
from engine.core.request import Request, SamplingParams
from engine.core.results import StepRecord, TokenEvent


@dataclass(frozen=True, slots=True)
class ArrivalSpec:
    """One request to submit. ``arrival_s`` None means "when triggered"."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    arrival_s: float | None = 0.0
    injected: bool = False
    priority: int = 0


class ArrivalSource(Protocol):
    """A workload as both drivers consume it."""

    def initial(self) -> list[ArrivalSpec]:
        """Timed arrivals, sorted by ``arrival_s``."""

    def on_token(self, event: TokenEvent) -> list[ArrivalSpec]:
        """Arrivals triggered by an output token; they arrive at ``event.time_s``."""

    def triggers_on_tokens(self) -> bool:
        """False when ``on_token`` never returns an arrival: the drivers then skip the call
        for every token of the run."""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One row of requests.csv."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    first_token_s: float | None
    finish_s: float | None
    injected: bool
    finish_reason: str | None
    admitted_s: float | None


BatchSignature = tuple[str, tuple[tuple[str, str, int, int, int, int], ...]]


def batch_signature(batch: Batch) -> BatchSignature:
    """Stage and item list, for comparing the batch sequences of two worlds."""
    return (
        batch.stage.value,
        tuple(
            (it.request_id, it.kind.value, it.position, it.num_tokens, it.depth, it.num_depths)
            for it in batch.items
        ),
    )


class RunRecords:
    """Raw rows of one run (one arm, one point, one repeat); metrics are computed after.
    Steps and tokens are held as columns (``engine.core.columns``); rows given as lists are
    converted. A run recorded without step rows (``RunRecorder(record_steps=False)``) counts
    its core calls in ``unrecorded_core_calls`` / ``unrecorded_mixed_core_calls`` instead."""

    def __init__(
        self,
        steps: Iterable[StepRecord] = (),
        tokens: Iterable[TokenEvent] = (),
        requests: list[RequestRecord] | None = None,
        batches: list[BatchSignature] | None = None,
        wall_s: float = 0.0,
        invalid_reasons: list[str] | None = None,
        prefix_cache: PrefixCacheStats | None = None,
    ) -> None:
        self.steps: StepTable = steps if isinstance(steps, StepTable) else StepTable.of(steps)
        self.tokens: TokenTable = (tokens if isinstance(tokens, TokenTable)
                                   else TokenTable.of(tokens))
        self.requests: list[RequestRecord] = [] if requests is None else requests
        self.batches: list[BatchSignature] = [] if batches is None else batches
        self.wall_s = wall_s
        self.invalid_reasons: list[str] = [] if invalid_reasons is None else invalid_reasons
        self.prefix_cache = prefix_cache  # at the drain; None with caching off
        # A simulated cluster's placements and per-replica totals (sim.cluster.records
        # ClusterInfo); None for one engine.
        self.cluster: object | None = None
        self.unrecorded_core_calls = 0
        self.unrecorded_mixed_core_calls = 0

    @property
    def num_core_calls(self) -> int:
        return sum(self.steps.core_calls) + self.unrecorded_core_calls

    @property
    def num_mixed_core_calls(self) -> int:
        return sum(self.steps.mixed) + self.unrecorded_mixed_core_calls


class RunRecorder:
    """Collects records; drivers call it around every step and on every finish.

    ``step`` writes ``StepRecord.from_batch``'s row (``StepTable.add_batch``, which a test
    compares with it on every arm): it runs once per step. With ``record_steps`` off (a run
    judged on its latencies alone, whose step rows nobody reads) it only counts the core
    calls and mixed ones; tokens and requests are the same.
    """

    def __init__(self, record_batches: bool = False, record_steps: bool = True) -> None:
        self.records = RunRecords()
        self.record_batches = record_batches
        self.record_steps = record_steps
        self._injected: set[str] = set()

    def submitted(self, spec: ArrivalSpec) -> None:
        if spec.injected:
            self._injected.add(spec.request_id)

    def step(
        self, batch: Batch, start_s: float, end_s: float, events: Iterable[TokenEvent],
        num_readbacks: int | None = None,
    ) -> None:
        records = self.records
        if self.record_steps:
            records.steps.add_batch(batch, start_s, end_s, num_readbacks)
        else:
            records.unrecorded_core_calls += batch.num_core_calls
            if batch.is_mixed:
                records.unrecorded_mixed_core_calls += 1
        if events:
            records.tokens.extend(events)
        if self.record_batches:
            records.batches.append(batch_signature(batch))

    def finished(self, requests: Iterable[Request]) -> None:
        for r in requests:
            self.records.requests.append(
                RequestRecord(
                    r.request_id, r.arrival_s, r.num_prompt_tokens, r.num_output_tokens,
                    r.first_token_s, r.finish_s, r.request_id in self._injected,
                    r.finish_reason, r.admitted_s,
                )
            )
