"""Feeding a workload into a core: timed arrivals in order, triggered ones, validity.

Both drivers (SimPy and real time) use this, so a request is submitted, and an injected one
judged, the same way in both worlds; they differ only in how time passes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from engine.core.engine_core import EngineCore
from engine.core.records import ArrivalSource, ArrivalSpec, RunRecorder
from engine.core.results import TokenEvent


def injection_problem(core: EngineCore, spec: ArrivalSpec, now_s: float) -> str | None:
    """Why an injected request submitted now makes the run invalid (RFC §6), or None: it must
    find a free slot and enough free KV blocks for its lifetime (less its cached prefix)."""
    max_num_seqs = core.cfg.scheduler.max_num_seqs
    if core.num_running >= max_num_seqs:
        return (
            f"injected request {spec.request_id} found no free slot at t={now_s:.6f}s "
            f"(num_running {core.num_running} == max_num_seqs {max_num_seqs})"
        )
    bm, prompt = core.block_manager, spec.prompt_token_ids
    prefix = bm.cached_prefix(bm.block_hashes(prompt), len(prompt))
    need = bm.blocks_to_admit(len(prompt) + spec.params.max_tokens - 1, prefix)
    free = bm.num_free_blocks
    if need > free:
        return (
            f"injected request {spec.request_id} found no KV capacity at t={now_s:.6f}s "
            f"(needs {need} blocks, {free} free)"
        )
    return None


def timed_arrivals(source: ArrivalSource) -> list[ArrivalSpec]:
    """The source's timed requests in arrival order; ValueError for one without a time >= 0."""
    timed = list(source.initial())
    for spec in timed:
        if spec.arrival_s is None or not spec.arrival_s >= 0.0:
            raise ValueError(
                f"workload: request {spec.request_id} has arrival_s {spec.arrival_s!r}; "
                "timed arrivals need a time >= 0"
            )
    timed.sort(key=lambda s: s.arrival_s or 0.0)
    return timed


def due_s(timed: list[ArrivalSpec], index: int) -> float:
    """When timed arrival ``index`` is due (inf when none is left)."""
    if index >= len(timed):
        return math.inf
    due = timed[index].arrival_s
    assert due is not None
    return due


class ArrivalFeeder:
    """Submits a source's requests into ``core`` and tells the recorder."""

    def __init__(self, core: EngineCore, source: ArrivalSource, recorder: RunRecorder) -> None:
        self.core = core
        self.source = source
        self.recorder = recorder
        self.timed = timed_arrivals(source)
        self.next_arrival = 0
        # Time of the next timed arrival (inf when none is left): a field, as the drivers
        # read it before and after every step.
        self.next_due_s = due_s(self.timed, 0)
        self.triggers_on_tokens = source.triggers_on_tokens()

    @property
    def exhausted(self) -> bool:
        """No timed arrival is left."""
        return self.next_arrival >= len(self.timed)

    def submit(self, spec: ArrivalSpec, arrival_s: float) -> None:
        if spec.injected:
            problem = injection_problem(self.core, spec, arrival_s)
            if problem is not None:
                self.recorder.records.invalid_reasons.append(problem)
        self.recorder.submitted(spec)
        self.core.add_request(
            spec.request_id, spec.prompt_token_ids, spec.params, arrival_s, spec.priority
        )

    def submit_due(self, now_s: float) -> None:
        """Submit every timed arrival at or before ``now_s``, in time order."""
        timed = self.timed
        while self.next_arrival < len(timed):
            spec = timed[self.next_arrival]
            due = spec.arrival_s
            assert due is not None
            if due > now_s:
                break
            self.next_arrival += 1
            self.next_due_s = due_s(self.timed, self.next_arrival)
            self.submit(spec, due)

    def on_events(self, events: Iterable[TokenEvent]) -> None:
        """Submit arrivals the source triggers on these tokens, each at its token's time."""
        if not self.triggers_on_tokens:
            return
        for event in events:
            for spec in self.source.on_token(event):
                self.submit(spec, event.time_s)
