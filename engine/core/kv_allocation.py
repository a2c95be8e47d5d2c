"""A request's per-plane block tables, and the block pool's integrity check (docs/design.md).

Kept apart from ``BlockManager``'s operations: the check runs only in tests and debugging,
and restates every invariant the operations keep.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.core.errors import KVIntegrityError
from engine.core.prefix_cache import CachedBlock, PrefixCache

Key = tuple[str, int]  # (request_id, generation)


@dataclass(slots=True)
class Allocation:
    """One request's claim: tables, reservation, written prefixes, shared entries. A running
    request holds its own (``Request.kv``), so the per-row paths skip the key lookup."""

    key: Key  # the (request_id, generation) the block manager files it under
    tables: list[list[int]]
    reserved_blocks: int = 0  # promised to this request, not yet claimed
    written: list[int] = field(default_factory=list)  # per plane: contiguous written prefix
    shared: dict[int, CachedBlock] = field(default_factory=dict)  # block index -> cached entry
    shared_end: int = 0  # positions below this may lie in a shared block
    published: int = 0  # full prompt blocks considered for publishing so far

    @property
    def blocks_per_plane(self) -> int:
        return len(self.tables[0])


def check_pool(
    num_blocks: int,
    block_size: int,
    free: list[int],
    allocs: Mapping[Key, Allocation],
    reserved_total: int,
    prefix_cache: PrefixCache | None,
) -> None:
    """Raise ``KVIntegrityError`` unless every block is exactly one of free, private to one
    request or in one cached entry; reservations fit the free and evictable blocks; and every
    cached entry is fully written, held by exactly ``ref_count`` tables at the same index on
    every plane."""
    pc = prefix_cache
    entries = [] if pc is None else pc.entries()
    evictable = 0 if pc is None else pc.num_evictable_blocks
    cached = [b for e in entries for b in e.blocks]
    private = [
        b for a in allocs.values() for t in a.tables for i, b in enumerate(t) if i not in a.shared
    ]
    all_blocks = private + cached + free
    if len(all_blocks) != num_blocks or len(set(all_blocks)) != num_blocks:
        raise KVIntegrityError(
            f"block pool corrupt: {len(private)} held + {len(cached)} cached + "
            f"{len(free)} free != {num_blocks} distinct blocks"
        )
    reserved = sum(a.reserved_blocks for a in allocs.values())
    if reserved != reserved_total or reserved > len(free) + evictable:
        raise KVIntegrityError(
            f"reservations {reserved} (tracked {reserved_total}) exceed free "
            f"blocks {len(free)} + evictable {evictable}"
        )
    refs: dict[int, int] = {}
    for key, a in allocs.items():
        if len({len(t) for t in a.tables}) != 1:
            raise KVIntegrityError(f"request {key}: planes have different lengths")
        for i, entry in a.shared.items():
            if any(t[i] != b for t, b in zip(a.tables, entry.blocks, strict=True)):
                raise KVIntegrityError(f"request {key}: block {i} is not its cached entry")
            if min(a.written) < (i + 1) * block_size:
                raise KVIntegrityError(f"request {key}: shared block {i} is not fully written")
            if pc is None or pc.get(entry.block_hash) is not entry:
                raise KVIntegrityError(f"request {key}: block {i} holds an evicted entry")
            refs[id(entry)] = refs.get(id(entry), 0) + 1
    if pc is not None:
        pc.check()
        for entry in entries:
            if refs.get(id(entry), 0) != entry.ref_count:
                raise KVIntegrityError(
                    f"prefix cache: entry {entry.blocks} counts {entry.ref_count} "
                    f"references but {refs.get(id(entry), 0)} tables hold it"
                )
