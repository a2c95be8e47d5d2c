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

from engine.core.batch import Batch, ItemKind
from engine.core.request import Stage
from sim.cost.base import item_context

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


def batch_features(batch: Batch) -> dict[str, float]:
    """The feature vector of one step, keyed by ``FEATURE_NAMES``."""
    f = dict.fromkeys(FEATURE_NAMES, 0.0)
    f["items"] = float(len(batch.items))
    f["finalize_copies"] = float(sum(len(op.to_depths) for op in batch.housekeeping.finalize))
    if batch.stage in (Stage.PRELUDE, Stage.CODA):
        f["rows"] = float(len(batch.items))
        return f
    f["core_calls"] = float(batch.num_core_calls)
    ctx_max = 0
    for call in batch.core_call_items():
        call_decode_rows = 0
        call_decode_ctx = 0
        for item, depth in call:
            n = item.num_tokens
            kv_tokens, ctx_sum, ctx_top = item_context(item)
            f["rows"] += n
            if item.kind is ItemKind.DECODE:
                f["decode_rows"] += n
                if item.needs_signal:  # decode items run one depth per step
                    f["signal_rows"] += 1
                call_decode_rows += n
                call_decode_ctx = max(call_decode_ctx, ctx_top)
            else:
                f["prompt_tokens"] += n
                f["prompt_seqs"] += 1
                f["prompt_context"] += n * kv_tokens
                f["prompt_kv_tokens"] += kv_tokens
            f["context_sum"] += ctx_sum
            ctx_max = max(ctx_max, ctx_top)
            if item.fused_prelude and depth == item.depth:
                f["fused_prelude_rows"] += n
        f["decode_padded_context"] += call_decode_rows * call_decode_ctx
    f["context_max"] = float(ctx_max)
    return f
