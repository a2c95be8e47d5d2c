"""A deterministic executor without torch: tokens and gate signals from seeded streams.

Signals are keyed by (request, position, depth) and tokens by (request, position), so
they do not depend on how work was batched: every arm sees the same signal trace.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.core.batch import Batch, ItemKind
from engine.core.exits import stable_seed
from engine.core.request import Stage
from engine.core.results import CodaResult, RecurrentResult, StepResult

SignalFn = Callable[[str, int, int], float]


def _unit(*parts: object) -> float:
    return (stable_seed(*parts) >> 11) / float(1 << 53)


class FakeExecutor:
    """Executes batches instantly; counts what it was asked to do."""

    def __init__(
        self,
        seed: int = 0,
        vocab_size: int = 64,
        signal_fn: SignalFn | None = None,
        eos_token_id: int | None = None,
    ) -> None:
        self.seed = seed
        self.vocab_size = vocab_size
        self.signal_fn = signal_fn or (
            lambda rid, pos, depth: _unit(seed, "signal", rid, pos, depth))
        self.eos_token_id = eos_token_id
        self.num_signals_read = 0
        self.live_handles: set[int] = set()
        self.released_handles: set[int] = set()
        self.finalized: list[tuple[str, int, int, tuple[int, ...]]] = []

    def token(self, request_id: str, index: int) -> int:
        return stable_seed(self.seed, "token", request_id, index) % self.vocab_size

    def execute(self, batch: Batch) -> StepResult:
        hk = batch.housekeeping
        for h in hk.released_handles:
            self.live_handles.discard(h.handle_id)
            self.released_handles.add(h.handle_id)
        for f in hk.finalize:
            self.finalized.append((f.request_id, f.position, f.from_depth, f.to_depths))
        for it in batch.items:
            if it.prompt_state is not None:
                if it.prompt_state.handle_id in self.released_handles:
                    raise RuntimeError(f"step {batch.step} uses released prompt state")
                self.live_handles.add(it.prompt_state.handle_id)
        if batch.stage is Stage.CODA:
            return CodaResult(
                batch.step,
                tuple(self.token(it.request_id, it.position) for it in batch.items),
            )
        if batch.stage is Stage.RECURRENT:
            decode = [it for it in batch.items if it.kind is ItemKind.DECODE]
            if not any(it.needs_signal for it in decode):
                return RecurrentResult(batch.step, None)
            self.num_signals_read += len(decode)
            return RecurrentResult(
                batch.step,
                tuple(self.signal_fn(it.request_id, it.position, it.depth) for it in decode),
            )
        return StepResult(batch.step)
