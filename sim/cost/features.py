"""The batch features a calibrated profile is fitted on (one row per step).

All counts cover every core call of the step (an atomic PREFILL step over D depths counts its
rows D times). ``context`` of a row is the number of KV positions it attends to
(``sim.cost.base.item_context``).

- ``core_calls``: recurrent-core traversals (0 for PRELUDE and CODA);
- ``items``: scheduled items;
- ``rows``: token rows over all core calls (PRELUDE/CODA: one per item);
- ``decode_rows`` / ``prompt_tokens``: the decode and prompt part of ``rows``;
- ``context_sum`` / ``context_max``: sum and max of per-row context over core-call rows;
- ``fused_prelude_rows``: prompt rows embedded inside a core call;
- ``finalize_copies``: KV positions copied into deeper planes by the step's housekeeping;
- ``signal_rows``: decode rows whose exit signal (gate or lookahead score) the step computes
  and reads back (adaptive exits only).

Added with the calibration (they describe how packed attention kernels spend their time):

- ``prompt_seqs``: prompt items over all core calls (each is its own attention sequence:
  per-sequence launches and metadata);
- ``decode_padded_context``: per core call, decode rows x the longest decode context of the
  call (a padded decode gather reads that rectangle), summed over calls;
- ``prompt_context``: per prompt item and call, rows x visible KV positions (n x (s + n): the
  masked score matrix), summed;
- ``prompt_kv_tokens``: per prompt item and call, the KV positions it streams (s + n), summed.
"""

from __future__ import annotations

from engine.core.batch import Batch, ItemKind, ScheduledItem
from engine.core.request import Stage

FEATURE_NAMES: tuple[str, ...] = (
    "core_calls",
    "items",
    "rows",
    "decode_rows",
    "prompt_tokens",
    "context_sum",
    "context_max",
    "fused_prelude_rows",
    "finalize_copies",
    "prompt_seqs",
    "decode_padded_context",
    "prompt_context",
    "prompt_kv_tokens",
    "signal_rows",
)
# The step kinds a calibrated profile prices: ``step_kind``'s six, and a decode step right
# after prompt work (``sim.cost.calibrated``).
STEP_KINDS: tuple[str, ...] = ("decode", "prompt", "mixed", "prefill", "prelude", "coda",
                               "decode_after_prompt")


FEATURE_INDEX: dict[str, int] = {name: i for i, name in enumerate(FEATURE_NAMES)}


def batch_features(batch: Batch) -> dict[str, float]:
    """The feature vector of one step, keyed by ``FEATURE_NAMES``."""
    return dict(zip(FEATURE_NAMES, feature_values(batch), strict=True))


def feature_values(batch: Batch) -> list[float]:
    """``batch_features(batch)``'s values in ``FEATURE_NAMES`` order, from one pass over the
    items: an item runs in its first ``num_depths`` core calls, so it counts that many times
    (its fused prelude once). The counts are summed as ints, which a float holds exactly."""
    items = batch.items
    copies = 0
    for op in batch.housekeeping.finalize:
        copies += len(op.to_depths)
    if batch.stage is Stage.PRELUDE or batch.stage is Stage.CODA:
        return [0.0, float(len(items)), float(len(items)), 0.0, 0.0, 0.0, 0.0, 0.0,
                float(copies), 0.0, 0.0, 0.0, 0.0, 0.0]
    rows = decode_rows = prompt_tokens = context_sum = context_max = fused_rows = 0
    prompt_seqs = prompt_context = prompt_kv_tokens = signal_rows = decode_context_max = 0
    for item in items:
        d = item.num_depths
        if d < 1:
            continue
        n = item.num_tokens
        s = item.position
        if item.kind is ItemKind.DECODE:  # item_context, written out: no tuple
            c = s + 1
            decode_rows += n * d
            if item.needs_signal:  # decode items run one depth per step
                signal_rows += d
            context_sum += c * d
            if c > decode_context_max:
                decode_context_max = c
        else:
            c = s + n  # the KV positions it streams, and its last row's context
            prompt_tokens += n * d
            prompt_seqs += d
            prompt_context += n * c * d
            prompt_kv_tokens += c * d
            context_sum += (n * s + n * (n + 1) // 2) * d
        rows += n * d
        if c > context_max:
            context_max = c
        if item.fused_prelude:  # its prelude runs in its first call
            fused_rows += n
    num_calls = batch.num_core_calls
    padded = (decode_rows * decode_context_max if num_calls == 1
              else _decode_padded_context(items, num_calls))
    return [float(num_calls), float(len(items)), float(rows), float(decode_rows),
            float(prompt_tokens), float(context_sum), float(context_max), float(fused_rows),
            float(copies), float(prompt_seqs), float(padded), float(prompt_context),
            float(prompt_kv_tokens), float(signal_rows)]


def _decode_padded_context(items: tuple[ScheduledItem, ...], num_calls: int) -> int:
    """Per core call, decode rows x the longest decode context of the call, summed: call k
    holds the items with more than k depths."""
    rows_at = [0] * (num_calls + 1)  # by num_depths
    context_at = [0] * (num_calls + 1)
    for item in items:
        d = item.num_depths
        if item.kind is ItemKind.DECODE and d >= 1:
            rows_at[d] += item.num_tokens
            context_at[d] = max(context_at[d], item.position + 1)
    padded = call_rows = call_context = 0
    for d in range(num_calls, 0, -1):  # call d - 1
        call_rows += rows_at[d]
        call_context = max(call_context, context_at[d])
        padded += call_rows * call_context
    return padded
