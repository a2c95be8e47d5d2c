"""One core call's inputs: row positions and attention metadata (docs/design.md).

Rows are the (item, depth) pairs of the call in order, decode rows first; each reads the
block table of its depth plane and writes one KV slot per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.block_tables import DeviceBlockTables
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
    pairs: CallPairs, block_manager: BlockManager, device: torch.device,
    tables: DeviceBlockTables,
) -> PreparedCall:
    """Metadata for one core call over (item, depth) pairs in row order (decode first); the
    backend's own ``prepare`` is the caller's. The block tables come from ``tables``, the
    device mirror (only their new entries travel). KVIntegrityError when a row would read a
    history that was never written or two rows would write one slot."""
    block_size = block_manager.block_size
    positions: list[int] = []
    slots: list[int] = []
    row_keys: list[tuple[tuple[str, int], int]] = []
    host_tables: list[list[int]] = []
    ctx_lens: list[int] = []
    q_lens: list[int] = []
    row_ranges: list[tuple[int, int]] = []
    num_decode = 0
    block_table, written_to, plane = (block_manager.block_table, block_manager.written,
                                      block_manager.plane)
    for item, depth in pairs:
        key = item.key
        table = block_table(key, depth)
        start, n = item.position, item.num_tokens
        written = written_to(key, depth)
        if written < start:
            raise KVIntegrityError(
                f"request {key}: depth {depth} history ends at {written} but a row at "
                f"position {start} reads it (finalize missing?)"
            )
        if item.kind is ItemKind.DECODE:
            num_decode += 1
        row = len(positions)
        row_ranges.append((row, row + n))
        if n == 1:  # decode rows: no per-position loop
            positions.append(start)
            slots.append(table[start // block_size] * block_size + start % block_size)
        else:
            positions += range(start, start + n)
            slots += [table[p // block_size] * block_size + p % block_size
                      for p in range(start, start + n)]
        row_keys.append((key, plane(depth)))
        host_tables.append(table)
        ctx_lens.append(start + n)
        q_lens.append(n)
    if len(set(slots)) != len(slots):
        raise KVIntegrityError("two rows of one core call write the same KV slot")
    num_rows, num_seqs = len(positions), len(host_tables)
    max_blocks = -(-max(ctx_lens) // block_size)
    rows, upd_idx, upd_vals = tables.rows(row_keys, host_tables, block_manager.holds)
    starts = [0]
    for n in q_lens:
        starts.append(starts[-1] + n)
    # One host->device copy for all integer metadata, block-table updates included.
    packed = upload_ints(positions + slots + ctx_lens + starts + rows + upd_idx + upd_vals,
                         device)
    # Slices, not torch.split (a third cheaper on the host); no update step when none.
    a, b, c = num_rows, 2 * num_rows, 2 * num_rows + num_seqs
    d, e = c + num_seqs + 1, c + 2 * num_seqs + 1
    pos_t, slot_t, ctx_t, start_t, rows_t = (packed[:a], packed[a:b], packed[b:c],
                                             packed[c:d], packed[d:e])
    if upd_idx:
        n = len(upd_idx)
        tables.apply(packed[e:e + n], packed[e + n:])
    meta = AttentionMetadata(
        slot_mapping=slot_t,
        block_tables=tables.gather(rows_t, max_blocks),
        context_lens=ctx_t,
        query_start_loc=start_t,
        block_size=block_size,
        num_decode_seqs=num_decode,
        context_lens_host=tuple(ctx_lens),
        query_lens_host=tuple(q_lens),
    )
    return PreparedCall(pos_t, meta, row_ranges)
