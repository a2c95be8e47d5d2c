"""Paged KV bookkeeping: one block table per depth plane (DESIGN.md §4).

Pure Python: the tensors live in the runner, which reads block ids from here. A request's
planes grow together. Admission either claims a request's whole lifetime at once, or (with
``incremental_allocation``) claims what it needs now and reserves the rest, so an admitted
request can always finish without preemption. Every claim is atomic: on failure nothing
changes.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from engine.core.config import CacheConfig
from engine.core.errors import KVIntegrityError

Key = tuple[str, int]  # (request_id, generation)


@dataclass(slots=True)
class _Allocation:
    tables: list[list[int]]
    reserved_blocks: int = 0  # promised to this request, not yet claimed
    written: list[int] = field(default_factory=list)  # per plane: contiguous written prefix

    @property
    def blocks_per_plane(self) -> int:
        return len(self.tables[0])


class BlockManager:
    """Block pool and per-request, per-plane block tables.

    ``num_free_blocks`` counts blocks neither claimed nor reserved.
    """

    def __init__(self, cache: CacheConfig, num_depths: int) -> None:
        self.cache = cache
        self.block_size = cache.block_size
        self.num_depths = num_depths
        self.num_planes = cache.num_planes(num_depths)
        self.num_blocks = cache.num_blocks
        self._free: deque[int] = deque(range(cache.num_blocks))
        self._allocs: dict[Key, _Allocation] = {}
        self._reserved_total = 0

    # ---- capacity -------------------------------------------------------------------------
    def blocks_for(self, num_tokens: int) -> int:
        """Blocks over all planes for ``num_tokens`` positions."""
        return self.cache.required_blocks(num_tokens, self.num_depths)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free) - self._reserved_total

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def num_reserved_blocks(self) -> int:
        return self._reserved_total

    def can_ever_fit(self, lifetime_tokens: int) -> bool:
        return self.blocks_for(lifetime_tokens) <= self.num_blocks

    def plane(self, depth: int) -> int:
        return 0 if self.num_planes == 1 else depth

    # ---- allocation -----------------------------------------------------------------------
    def allocate(self, key: Key, num_tokens: int, lifetime_tokens: int) -> bool:
        """Claim ``num_tokens`` now and reserve up to ``lifetime_tokens``; False changes nothing."""
        if key in self._allocs:
            raise KVIntegrityError(f"request {key} already holds KV blocks")
        lifetime = self.blocks_for(max(lifetime_tokens, num_tokens))
        if lifetime > self.num_free_blocks:
            return False
        per_plane = math.ceil(num_tokens / self.block_size)
        tables = [[self._free.popleft() for _ in range(per_plane)] for _ in range(self.num_planes)]
        reserved = lifetime - per_plane * self.num_planes
        self._reserved_total += reserved
        self._allocs[key] = _Allocation(tables, reserved, [0] * self.num_planes)
        return True

    def ensure_capacity(self, key: Key, num_tokens: int) -> bool:
        """Grow every plane to hold ``num_tokens`` positions; False changes nothing."""
        alloc = self._allocs[key]
        per_plane = math.ceil(num_tokens / self.block_size)
        extra = (per_plane - alloc.blocks_per_plane) * self.num_planes
        if extra <= 0:
            return True
        from_reserve = min(extra, alloc.reserved_blocks)
        if extra - from_reserve > self.num_free_blocks:
            return False
        alloc.reserved_blocks -= from_reserve
        self._reserved_total -= from_reserve
        for table in alloc.tables:
            while len(table) < per_plane:
                table.append(self._free.popleft())
        return True

    def free(self, key: Key) -> None:
        alloc = self._allocs.pop(key, None)
        if alloc is None:
            return
        self._reserved_total -= alloc.reserved_blocks
        for table in alloc.tables:
            self._free.extend(table)

    def holds(self, key: Key) -> bool:
        return key in self._allocs

    def block_table(self, key: Key, depth: int) -> list[int]:
        """The block ids of the plane a row at ``depth`` reads and writes."""
        return self._allocs[key].tables[self.plane(depth)]

    def capacity_tokens(self, key: Key) -> int:
        return self._allocs[key].blocks_per_plane * self.block_size

    # ---- written-prefix tracking ----------------------------------------------------------
    def written(self, key: Key, depth: int) -> int:
        return self._allocs[key].written[self.plane(depth)]

    def mark_written(self, key: Key, depth: int, start: int, end: int) -> None:
        """Record that positions [start, end) were written at ``depth``'s plane."""
        alloc = self._allocs[key]
        plane = self.plane(depth)
        if start > alloc.written[plane]:
            raise KVIntegrityError(
                f"request {key}: depth {depth} writes from {start} but history is written "
                f"only up to {alloc.written[plane]}"
            )
        if end > alloc.blocks_per_plane * self.block_size:
            raise KVIntegrityError(f"request {key}: write to {end} exceeds claimed capacity")
        alloc.written[plane] = max(alloc.written[plane], end)

    def mark_token(self, key: Key, depth: int, position: int) -> None:
        """``mark_written`` for one decode token (the hot path: one call per row per step)."""
        alloc = self._allocs[key]
        written = alloc.written
        plane = 0 if self.num_planes == 1 else depth
        if position > written[plane] or position >= len(alloc.tables[0]) * self.block_size:
            self.mark_written(key, depth, position, position + 1)  # raises with the reason
        elif position == written[plane]:
            written[plane] = position + 1

    def finalize(self, key: Key, position: int, exit_depth: int) -> tuple[int, ...]:
        """A decode token at ``position`` exited after zero-based depth ``exit_depth``: its K/V
        now stands in planes exit_depth+1..D-1. Returns the depths to copy into."""
        if self.num_planes == 1:
            return ()
        alloc = self._allocs[key]
        targets = tuple(range(exit_depth + 1, self.num_depths))
        for d in targets:
            if alloc.written[d] != position:
                raise KVIntegrityError(
                    f"request {key}: finalizing position {position} into depth {d} whose "
                    f"history ends at {alloc.written[d]}"
                )
            alloc.written[d] = position + 1
        return targets

    # ---- checks ---------------------------------------------------------------------------
    def check_integrity(self) -> None:
        """Raise if blocks leak, are held twice, or reservations exceed the free pool."""
        held = [b for a in self._allocs.values() for t in a.tables for b in t]
        all_blocks = held + list(self._free)
        if len(all_blocks) != self.num_blocks or len(set(all_blocks)) != self.num_blocks:
            raise KVIntegrityError(
                f"block pool corrupt: {len(held)} held + {len(self._free)} free != "
                f"{self.num_blocks} distinct blocks"
            )
        reserved = sum(a.reserved_blocks for a in self._allocs.values())
        if reserved != self._reserved_total or reserved > len(self._free):
            raise KVIntegrityError(
                f"reservations {reserved} (tracked {self._reserved_total}) exceed free "
                f"blocks {len(self._free)}"
            )
        for key, a in self._allocs.items():
            if len({len(t) for t in a.tables}) != 1:
                raise KVIntegrityError(f"request {key}: planes have different lengths")
