"""Items of a batch whose request went away between ``schedule`` and ``execute``.

A server aborts on client disconnect at any moment; an aborted (or reused) id holds no KV
blocks any more, so the runner runs only the live items and fills the result back to the
batch's shape (the core ignores those rows: ``docs/contracts.md``, apply).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from engine.core.batch import Batch, ScheduledItem
from engine.core.request import Request, Stage
from engine.core.results import CodaResult, RecurrentResult, StepResult


def live_items(
    batch: Batch, requests: Mapping[str, Request] | None
) -> tuple[ScheduledItem, ...] | None:
    """The items still wanted, or None when all are (or no core is bound)."""
    if requests is None:
        return None
    live = []
    for it in batch.items:
        req = requests.get(it.request_id)
        if req is not None and req.generation == it.generation:
            live.append(it)
    return None if len(live) == len(batch.items) else tuple(live)


def expand_result(batch: Batch, live: tuple[ScheduledItem, ...], result: StepResult) -> StepResult:
    """Fit the result of ``batch``'s live items back to the whole batch; the core ignores
    what stands in for the dropped items (token 0, a NaN signal)."""
    kept = {id(it) for it in live}
    if isinstance(result, CodaResult):
        tokens = iter(result.token_ids)
        lps = iter(result.logprobs) if result.logprobs is not None else None
        return CodaResult(
            batch.step, tuple(next(tokens) if id(it) in kept else 0 for it in batch.items),
            None if lps is None else tuple(
                next(lps) if id(it) in kept else None for it in batch.items),
        )
    if batch.stage is Stage.RECURRENT:
        signals = result.decode_signals if isinstance(result, RecurrentResult) else None
        if signals is None:
            return RecurrentResult(batch.step, None)
        got = iter(signals)
        decode = batch.items[: batch.num_decode_items]
        return RecurrentResult(
            batch.step, tuple(next(got) if id(it) in kept else math.nan for it in decode)
        )
    if batch.stage is Stage.CODA:
        return CodaResult(batch.step, (0,) * len(batch.items))
    return StepResult(batch.step)
