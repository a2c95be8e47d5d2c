"""One core call's inputs: row positions and attention metadata (DESIGN.md §8).

Rows are the (item, depth) pairs of the call in order, decode rows first; each reads the
block table of its depth plane and writes one KV slot per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine.core.batch import ItemKind, ScheduledItem
from engine.core.block_manager import BlockManager
from engine.core.errors import KVIntegrityError
from engine.uploads import upload_ints
from kernels.attention import AttentionMetadata

CallPairs = list[tuple[ScheduledItem, int]]


@dataclass(slots=True)
class PreparedCall:
    """One core call's inputs: row positions, attention metadata, each pair's row range."""

    positions: torch.Tensor
    meta: AttentionMetadata
    row_ranges: list[tuple[int, int]]


def prepare_call(
    pairs: CallPairs, block_manager: BlockManager, device: torch.device
) -> PreparedCall:
    """Metadata for one core call over (item, depth) pairs in row order (decode first); the
    backend's own ``prepare`` is the caller's. KVIntegrityError when a row would read a
    history that was never written or two rows would write one slot."""
    block_size = block_manager.block_size
    positions: list[int] = []
    slots: list[int] = []
    tables: list[list[int]] = []
    ctx_lens: list[int] = []
    q_lens: list[int] = []
    row_ranges: list[tuple[int, int]] = []
    num_decode = 0
    for item, depth in pairs:
        key = item.key
        table = block_manager.block_table(key, depth)
        start, n = item.position, item.num_tokens
        written = block_manager.written(key, depth)
        if written < start:
            raise KVIntegrityError(
                f"request {key}: depth {depth} history ends at {written} but a row at "
                f"position {start} reads it (finalize missing?)"
            )
        if item.kind is ItemKind.DECODE:
            num_decode += 1
        row_ranges.append((len(positions), len(positions) + n))
        for p in range(start, start + n):
            positions.append(p)
            slots.append(table[p // block_size] * block_size + p % block_size)
        tables.append(table)
        ctx_lens.append(start + n)
        q_lens.append(n)
    if len(set(slots)) != len(slots):
        raise KVIntegrityError("two rows of one core call write the same KV slot")
    num_rows, num_seqs = len(positions), len(tables)
    max_blocks = math.ceil(max(ctx_lens) / block_size)
    flat_tables = [b for t in tables for b in (t[:max_blocks] + [0] * (max_blocks - len(t)))]
    starts = [0]
    for n in q_lens:
        starts.append(starts[-1] + n)
    # One host->device copy for all integer metadata.
    packed = upload_ints(positions + slots + ctx_lens + starts + flat_tables, device)
    pos_t, slot_t, ctx_t, start_t, table_t = torch.split(
        packed, [num_rows, num_rows, num_seqs, num_seqs + 1, num_seqs * max_blocks]
    )
    meta = AttentionMetadata(
        slot_mapping=slot_t,
        block_tables=table_t.view(num_seqs, max_blocks),
        context_lens=ctx_t,
        query_start_loc=start_t,
        block_size=block_size,
        num_decode_seqs=num_decode,
        context_lens_host=tuple(ctx_lens),
        query_lens_host=tuple(q_lens),
    )
    return PreparedCall(pos_t, meta, row_ranges)
