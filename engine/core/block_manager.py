"""Paged KV bookkeeping: one block table per depth plane (docs/design.md).

Pure Python: the tensors live in the runner, which reads block ids from here. A request's
planes grow together. Admission either claims a request's whole lifetime at once, or (with
``incremental_allocation``) claims what it needs now and reserves the rest, so an admitted
request can always finish without preemption. Every claim is atomic: on failure nothing
changes.

With ``enable_prefix_caching`` a table's leading blocks may be cached entries shared with
other requests (``engine.core.prefix_cache``): a hit at admission, or a request's own full
prompt block once published. A shared block is never written, finalized into or evicted;
freed, it stays cached and counts as free capacity until the pool evicts it (LRU).

Without prefix caching the same machinery shares one prompt's blocks within a request group
only (the ``n`` samples of one prompt, ``engine.parallel_sampling``): a grouped request's
block hashes chain from a root naming its group, so no other request can hit them, and an
entry is dropped back to the free list as soon as no table holds it. Nothing is counted in
the prefix-cache stats, and under the ``shared`` layout (whose prompt K/V depends on where a
chunk starts) grouped requests share nothing.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from engine.core.config import CacheConfig
from engine.core.errors import KVIntegrityError
from engine.core.kv_allocation import Allocation, Key, check_pool
from engine.core.prefix_cache import CachedBlock, PrefixCache, hash_prompt_blocks, root_hash


class BlockManager:
    """Block pool and per-request, per-plane block tables.

    ``num_free_blocks`` counts blocks neither claimed nor reserved, cached-unreferenced ones
    included (they are evicted on demand); ``num_used_blocks`` those some request holds.
    """

    def __init__(self, cache: CacheConfig, num_depths: int) -> None:
        self.cache = cache
        self.block_size = cache.block_size
        self.num_depths = num_depths
        self.num_planes = cache.num_planes(num_depths)
        self.num_blocks = cache.num_blocks
        self._free: deque[int] = deque(range(cache.num_blocks))
        self._allocs: dict[Key, Allocation] = {}
        self._reserved_total = 0
        self.prefix_cache: PrefixCache | None = (
            PrefixCache(self.num_planes) if cache.enable_prefix_caching else None
        )
        # The cache the tables share entries of: the prefix cache, or with caching off a
        # group-scoped one (None under the shared layout, where nothing is shared).
        self._pc: PrefixCache | None = self.prefix_cache
        if self._pc is None and cache.layout != "shared":
            self._pc = PrefixCache(self.num_planes)
        # Everything per engine that changes a prompt position's K/V besides its tokens.
        self._prefix_key = f"{cache.layout}/{num_depths}"
        self._prefix_root = root_hash(self._prefix_key)
        # finalize's copy targets by exit depth, built once: one tuple per exited token otherwise.
        self._finalize_targets = [tuple(range(d + 1, num_depths)) for d in range(num_depths + 1)]

    # ---- capacity -------------------------------------------------------------------------
    def blocks_for(self, num_tokens: int) -> int:
        """Blocks over all planes for ``num_tokens`` positions."""
        return self.cache.required_blocks(num_tokens, self.num_depths)

    @property
    def _num_evictable(self) -> int:
        pc = self._pc
        return 0 if pc is None else pc.num_evictable_blocks

    @property
    def num_free_blocks(self) -> int:
        return len(self._free) + self._num_evictable - self._reserved_total

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free) - self._num_evictable

    @property
    def num_reserved_blocks(self) -> int:
        return self._reserved_total

    @property
    def num_cached_blocks(self) -> int:
        """Blocks in cached entries, referenced or not."""
        pc = self.prefix_cache
        return 0 if pc is None else pc.num_entries * self.num_planes

    def can_ever_fit(self, lifetime_tokens: int) -> bool:
        return self.blocks_for(lifetime_tokens) <= self.num_blocks

    def plane(self, depth: int) -> int:
        return 0 if self.num_planes == 1 else depth

    def _take_block(self) -> int:
        """A free block, evicting the least recently used cached one when none is."""
        if not self._free:
            pc = self._pc
            evicted = None if pc is None else pc.evict_lru()
            if evicted is None:
                raise KVIntegrityError("block pool exhausted below its promised capacity")
            self._free.extend(evicted)
        return self._free.popleft()

    # ---- allocation -----------------------------------------------------------------------
    def block_hashes(
        self, prompt_token_ids: Sequence[int], group: str | None = None
    ) -> list[bytes]:
        """The prompt's chained full-block hashes: computed once per request, when it
        arrives. Without prefix caching only a grouped request has them, chained from its
        group's own root; [] otherwise."""
        if self.prefix_cache is not None:
            root = self._prefix_root
        elif self._pc is not None and group is not None:
            root = root_hash(f"{self._prefix_key}/group/{group}")
        else:
            return []
        return hash_prompt_blocks(prompt_token_ids, self.block_size, root)

    def cached_prefix(
        self, block_hashes: Sequence[bytes], num_prompt_tokens: int
    ) -> list[CachedBlock]:
        """The longest cached prefix of a prompt, as a lookup (no reference taken). At least
        its last token stays uncached, so the first output token has a hidden state to come
        from (vLLM recomputes it too): a whole-prompt hit recomputes the last block."""
        pc = self._pc
        if pc is None or not block_hashes:
            return []
        return pc.longest_prefix(block_hashes, (num_prompt_tokens - 1) // self.block_size)

    def blocks_to_admit(self, lifetime_tokens: int, prefix: Sequence[CachedBlock] = ()) -> int:
        """Free blocks admitting a request of ``lifetime_tokens`` with cached ``prefix`` takes:
        its lifetime less the hit, plus the hit entries nobody holds (referenced, they leave
        the evictable pool)."""
        unheld = sum(1 for e in prefix if e.ref_count == 0)
        return self.blocks_for(lifetime_tokens) - (len(prefix) - unheld) * self.num_planes

    def allocate(
        self, key: Key, num_tokens: int, lifetime_tokens: int,
        prefix: Sequence[CachedBlock] = (),
    ) -> bool:
        """Claim ``num_tokens`` now and reserve up to ``lifetime_tokens``; False changes
        nothing. ``prefix`` (from ``cached_prefix``) becomes the tables' leading blocks,
        counted neither as claimed nor reserved, with its positions written on every plane."""
        if key in self._allocs:
            raise KVIntegrityError(f"request {key} already holds KV blocks")
        hit = len(prefix)
        lifetime_tokens = max(lifetime_tokens, num_tokens)
        if self.blocks_to_admit(lifetime_tokens, prefix) > self.num_free_blocks:
            return False
        lifetime = self.blocks_for(lifetime_tokens) - hit * self.num_planes
        per_plane = max(math.ceil(num_tokens / self.block_size), hit)
        if self._pc is not None and prefix:
            self._pc.acquire(prefix)
        tables = [[e.blocks[p] for e in prefix] for p in range(self.num_planes)]
        for table in tables:
            while len(table) < per_plane:
                table.append(self._take_block())
        reserved = lifetime - (per_plane - hit) * self.num_planes
        self._reserved_total += reserved
        hit_tokens = hit * self.block_size
        self._allocs[key] = Allocation(
            key, tables, reserved, [hit_tokens] * self.num_planes,
            dict(enumerate(prefix)), hit_tokens, hit,
        )
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
                table.append(self._take_block())
        return True

    def free(self, key: Key) -> None:
        """Release exactly what ``key`` holds: its own blocks return to the pool, its
        references to cached entries are dropped (the entries stay cached; a group's entries
        without prefix caching return to the pool once no table holds them)."""
        alloc = self._allocs.pop(key, None)
        if alloc is None:
            return
        self._reserved_total -= alloc.reserved_blocks
        shared = alloc.shared
        for table in alloc.tables:
            if shared:
                self._free.extend([b for i, b in enumerate(table) if i not in shared])
            else:
                self._free.extend(table)
        pc = self._pc
        if shared and pc is not None:
            pc.release([shared[i] for i in sorted(shared)])
            if self.prefix_cache is None:
                while (evicted := pc.evict_lru()) is not None:
                    self._free.extend(evicted)

    def holds(self, key: Key) -> bool:
        return key in self._allocs

    def allocation(self, key: Key) -> Allocation | None:
        """What ``key`` holds, or None: a request keeps it while it runs (``Request.kv``)."""
        return self._allocs.get(key)

    def block_table(self, key: Key, depth: int) -> list[int]:
        """The block ids of the plane a row at ``depth`` reads and writes."""
        return self._allocs[key].tables[self.plane(depth)]

    def capacity_tokens(self, key: Key) -> int:
        return self._allocs[key].blocks_per_plane * self.block_size

    def is_shared(self, key: Key, block_index: int) -> bool:
        """Whether ``key``'s block ``block_index`` is a cached entry (on every plane)."""
        return block_index in self._allocs[key].shared

    # ---- prefix publishing ----------------------------------------------------------------
    def publish(self, key: Key, block_hashes: Sequence[bytes], num_tokens: int) -> None:
        """Cache ``key``'s full prompt blocks within its first ``num_tokens`` positions; every
        plane of them must be written (the chunk finished depth D-1). The hashes cover full
        prompt blocks only, so a block holding a decode position is never published."""
        pc = self._pc
        if pc is None:
            return
        alloc = self._allocs[key]
        upto = min(len(block_hashes), num_tokens // self.block_size)
        for i in range(alloc.published, upto):
            if i in alloc.shared:
                continue
            end = (i + 1) * self.block_size
            if min(alloc.written) < end:
                raise KVIntegrityError(
                    f"request {key}: publishing block {i} before every plane of it is written"
                )
            entry = pc.publish(block_hashes[i], tuple(t[i] for t in alloc.tables))
            if entry is not None:
                alloc.shared[i] = entry
                alloc.shared_end = max(alloc.shared_end, end)
        alloc.published = max(alloc.published, upto)

    def _check_unshared(self, alloc: Allocation, key: Key, start: int, end: int) -> None:
        bs = self.block_size
        for i in range(start // bs, (end - 1) // bs + 1):
            if i in alloc.shared:
                raise KVIntegrityError(
                    f"request {key}: write to positions [{start}, {end}) touches shared block {i}"
                )

    # ---- written-prefix tracking ----------------------------------------------------------
    def written(self, key: Key, depth: int) -> int:
        return self._allocs[key].written[self.plane(depth)]

    def mark_written(self, key: Key, depth: int, start: int, end: int) -> None:
        """Record that positions [start, end) were written at ``depth``'s plane."""
        self.mark_range(self._allocs[key], depth, start, end)

    def mark_range(self, alloc: Allocation, depth: int, start: int, end: int) -> None:
        """``mark_written`` on a held allocation (``Request.kv``), without the key lookup."""
        key = alloc.key
        plane = self.plane(depth)
        if start > alloc.written[plane]:
            raise KVIntegrityError(
                f"request {key}: depth {depth} writes from {start} but history is written "
                f"only up to {alloc.written[plane]}"
            )
        if end > alloc.blocks_per_plane * self.block_size:
            raise KVIntegrityError(f"request {key}: write to {end} exceeds claimed capacity")
        if start < alloc.shared_end:
            self._check_unshared(alloc, key, start, end)
        alloc.written[plane] = max(alloc.written[plane], end)

    def mark_token(self, alloc: Allocation, depth: int, position: int) -> None:
        """``mark_written`` for one decode token of a held allocation (``allocation(key)``,
        which a running request keeps as ``Request.kv``): the hot path, one call per row per
        step, so it takes the allocation rather than looking up its key."""
        written = alloc.written
        plane = 0 if self.num_planes == 1 else depth
        end = written[plane]
        if (
            position > end
            or position >= len(alloc.tables[0]) * self.block_size
            or position < alloc.shared_end
        ):
            self.mark_range(alloc, depth, position, position + 1)  # raises the reason
        elif position == end:
            written[plane] = position + 1

    def finalize(self, alloc: Allocation, position: int, exit_depth: int) -> tuple[int, ...]:
        """A decode token at ``position`` of a held allocation exited after zero-based depth
        ``exit_depth``: its K/V now stands in planes exit_depth+1..D-1. Returns the depths to
        copy into."""
        if self.num_planes == 1:
            return ()
        key = alloc.key
        if position < alloc.shared_end:
            self._check_unshared(alloc, key, position, position + 1)
        targets = self._finalize_targets[exit_depth]
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
        """Raise if blocks leak, are held twice, reservations exceed the free pool, or a
        cached entry's references disagree with the tables holding it."""
        check_pool(
            self.num_blocks, self.block_size, list(self._free), self._allocs,
            self._reserved_total, self._pc,
        )
