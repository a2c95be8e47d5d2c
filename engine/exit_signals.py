"""Exit signals of a RECURRENT step's decode rows (docs/design.md).

A decode row that needs one gets the model's gate (lambda) or a random_lookahead head's
score; the others get NaN (never read by the core). Only the scored rows are read back,
in one readback.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from engine.call_metadata import CallPairs
from engine.core.batch import ScheduledItem
from engine.model.lookahead import LookaheadHeads
from engine.readback import Readbacks
from engine.uploads import upload_ints


def exit_signals(
    pairs: CallPairs,
    y: torch.Tensor,
    num_decode: int,
    *,
    gate: Callable[[torch.Tensor], torch.Tensor],
    heads: LookaheadHeads,
    lookahead_seed: Callable[[ScheduledItem], int],
    readbacks: Readbacks,
    device: torch.device,
) -> tuple[float, ...]:
    """lambda (gate) or lookahead score for the first ``num_decode`` rows of ``y`` (the
    decode rows of the call ``pairs``) that need one; NaN elsewhere."""
    out = [math.nan] * num_decode
    by_head: dict[int | None, list[int]] = {}
    for i, (item, _) in enumerate(pairs[:num_decode]):
        if item.needs_signal:
            head = lookahead_seed(item) if item.signal_head == "lookahead" else None
            by_head.setdefault(head, []).append(i)
    rows_read: list[int] = []
    scores: list[torch.Tensor] = []
    for head_seed, rows in by_head.items():
        # A leading run of rows is a view; else an index upload (a list index would sync).
        h = y[:len(rows)] if rows[-1] == len(rows) - 1 else y.index_select(
            0, upload_ints(rows, device))
        score = gate(h) if head_seed is None else heads(head_seed)(h)
        scores.append(score.float())
        rows_read += rows
    if scores:
        host = readbacks.host(scores[0] if len(scores) == 1 else torch.cat(scores))
        for i, v in zip(rows_read, host.tolist(), strict=True):
            out[i] = float(v)
    return tuple(out)
