"""Block tables mirrored on the device, so a core call uploads row ids, not whole tables.

Each (request, plane) table the runner has seen gets a row of one device tensor; a core call
sends only the entries appended since the last call (a table grows by one block every
``block_size`` tokens) plus one row id per sequence, and gathers its [seqs, blocks] tables
on the device. Without it every core call re-sent every sequence's whole table: at 64
sequences of 4096 tokens in 16-token blocks, 16k integers per call, every depth.
Rows whose request no longer holds KV are reused; a row is re-synced from scratch when its
key's table is a different list (the block manager allocated it again).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Key = tuple[str, int]
RowKey = tuple[Key, int]  # (request key, plane)


class DeviceBlockTables:
    """The device copy of the block tables of every (request, plane) in use."""

    def __init__(self, num_rows: int, max_blocks: int, device: torch.device) -> None:
        self.device = device
        self.table = torch.zeros(max(1, num_rows), max(1, max_blocks), dtype=torch.int64,
                                 device=device)
        self._row: dict[RowKey, int] = {}
        self._synced: list[tuple[list[int] | None, int]] = [(None, 0)] * self.table.shape[0]
        self._free = list(range(self.table.shape[0] - 1, -1, -1))

    @property
    def max_blocks(self) -> int:
        return int(self.table.shape[1])

    def _grow(self, rows: int, cols: int) -> None:
        old = self.table
        r, c = max(rows, old.shape[0]), max(cols, old.shape[1])
        self.table = torch.zeros(r, c, dtype=torch.int64, device=self.device)
        self.table[: old.shape[0], : old.shape[1]] = old
        self._free += list(range(r - 1, old.shape[0] - 1, -1))
        self._synced += [(None, 0)] * (r - old.shape[0])

    def _new_row(self, holds: Callable[[Key], bool]) -> int:
        if not self._free:  # reclaim the rows of requests that no longer hold KV
            for rk in [rk for rk in self._row if not holds(rk[0])]:
                self._free.append(self._row.pop(rk))
        if not self._free:
            self._grow(2 * self.table.shape[0], self.table.shape[1])
        return self._free.pop()

    def rows(self, row_keys: Sequence[RowKey], tables: Sequence[list[int]],
             holds: Callable[[Key], bool]) -> tuple[list[int], list[int], list[int]]:
        """Row ids for the (row key, host table) pairs, and the (flat index, value) updates
        that bring their device rows up to date (apply them with ``apply``)."""
        row_of, synced = self._row, self._synced
        row_ids: list[int] = []
        idx: list[int] = []
        vals: list[int] = []
        for rk, table in zip(row_keys, tables, strict=True):
            row = row_of.get(rk)
            if row is None:
                row = row_of[rk] = self._new_row(holds)
                synced = self._synced  # _new_row may have grown the table
            seen, n = synced[row]
            length = len(table)
            if seen is table and length == n:  # the steady state: nothing to send
                row_ids.append(row)
                continue
            if length > self.table.shape[1]:
                self._regrid(idx, length)
            width = self.table.shape[1]
            if seen is not table:  # a new or re-allocated table: rewrite, zero the stale tail
                if n > length:
                    idx += range(row * width + length, row * width + n)
                    vals += [0] * (n - length)
                n = 0
            idx += range(row * width + n, row * width + length)
            vals += table[n:]
            synced[row] = (table, length)
            row_ids.append(row)
        return row_ids, idx, vals

    def _regrid(self, pending: list[int], columns: int) -> None:
        """Widen the table; flat indices already pending move with their rows."""
        width = self.table.shape[1]
        self._grow(self.table.shape[0], max(columns, 2 * width))
        new = self.table.shape[1]
        pending[:] = [(i // width) * new + i % width for i in pending]

    def apply(self, idx: torch.Tensor, vals: torch.Tensor) -> None:
        """Write the updates ``rows`` returned (already on the device)."""
        if idx.numel():
            self.table.view(-1).index_copy_(0, idx, vals)

    def gather(self, row_ids: torch.Tensor, num_blocks: int) -> torch.Tensor:
        """[len(row_ids), num_blocks] tables of a core call."""
        return self.table[:, :num_blocks].index_select(0, row_ids)
