"""Prefix caching across requests on per-depth KV planes (docs/design.md).

vLLM V1's automatic prefix caching, extended to looped models: only full prompt blocks are
cached, and a block's hash chains its parent block's hash with the block's token ids, so one
hash names one prefix. Prompt positions run every depth under ``last_exited``, so a cached
entry covers the block of **every** depth plane at those positions; the block manager
publishes it only once every plane of it is written (the chunk holding it has completed depth
D-1). Entries are reference-counted by the requests whose tables hold them; an unreferenced
entry stays cached and is evicted least recently used first, only when the pool needs blocks.

What else could change a prompt position's K/V: the model and the cache layout (fixed per
engine, folded into the root hash), the token ids before it and its position (fixed by the
chain). Nothing per request does: prompt positions run all D depths whatever the exit mode,
and sampling never touches K/V. ``extra_key`` leaves room for a per-request salt.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from engine.core.errors import KVIntegrityError


def root_hash(extra_key: str) -> bytes:
    """The parent hash of a prompt's first block (an engine's K/V-affecting constants)."""
    return hashlib.sha256(b"loopserve-prefix\0" + extra_key.encode()).digest()


def hash_prompt_blocks(token_ids: Sequence[int], block_size: int, root: bytes) -> list[bytes]:
    """Chained hashes of the prompt's full blocks, in order (a partial last block has none)."""
    hashes: list[bytes] = []
    parent = root
    fmt = f"<{block_size}q"
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        h = hashlib.sha256(parent)
        h.update(struct.pack(fmt, *token_ids[start:start + block_size]))
        parent = h.digest()
        hashes.append(parent)
    return hashes


@dataclass(slots=True, eq=False)
class CachedBlock:
    """One cached prompt block: its hash, the block id on each plane, and how many request
    tables hold it (0: evictable)."""

    block_hash: bytes
    blocks: tuple[int, ...]
    ref_count: int = 0


@dataclass(slots=True)
class PrefixCacheStats:
    """vLLM's terms: prompt tokens queried at admission and how many of them hit."""

    num_requests: int = 0
    queried_tokens: int = 0
    hit_tokens: int = 0
    evicted_blocks: int = 0  # physical blocks, over all planes

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0

    def copy(self) -> PrefixCacheStats:
        return PrefixCacheStats(
            self.num_requests, self.queried_tokens, self.hit_tokens, self.evicted_blocks
        )

    def record(self, queried_tokens: int, hit_tokens: int) -> None:
        """One admitted request: its prompt tokens and the cached prefix it got."""
        self.num_requests += 1
        self.queried_tokens += queried_tokens
        self.hit_tokens += hit_tokens


class PrefixCache:
    """Hash -> cached entry, with the LRU order of the unreferenced ones.

    Owns no blocks itself: the block manager moves blocks between its free list, request
    tables and this cache.
    """

    def __init__(self, num_planes: int) -> None:
        self.num_planes = num_planes
        self._entries: dict[bytes, CachedBlock] = {}
        # Unreferenced entries, least recently used first. An OrderedDict, not a dict: popping
        # a plain dict's first key scans the holes earlier pops left (quadratic under churn).
        self._evictable: OrderedDict[bytes, CachedBlock] = OrderedDict()
        self.stats = PrefixCacheStats()

    @property
    def num_entries(self) -> int:
        return len(self._entries)

    @property
    def num_evictable_blocks(self) -> int:
        return len(self._evictable) * self.num_planes

    def get(self, block_hash: bytes) -> CachedBlock | None:
        return self._entries.get(block_hash)

    def longest_prefix(self, hashes: Sequence[bytes], max_blocks: int) -> list[CachedBlock]:
        """The cached entries of the longest cached prefix, at most ``max_blocks`` long.
        A lookup: it takes no reference and does not touch the LRU order."""
        hit: list[CachedBlock] = []
        entries = self._entries
        for h in hashes[:max_blocks]:
            entry = entries.get(h)
            if entry is None:
                break
            hit.append(entry)
        return hit

    def acquire(self, entries: Sequence[CachedBlock]) -> None:
        """A request's table now holds ``entries``."""
        for entry in entries:
            if entry.ref_count == 0:
                del self._evictable[entry.block_hash]
            entry.ref_count += 1

    def release(self, entries: Sequence[CachedBlock]) -> None:
        """A request's table let go of ``entries`` (in block order). The deepest block
        becomes the least recently used, so a prefix's tail is evicted before its head (a
        child without its parent can never hit)."""
        for entry in reversed(entries):
            if entry.ref_count <= 0:
                raise KVIntegrityError(
                    f"prefix cache: releasing block {entry.blocks} with no reference"
                )
            entry.ref_count -= 1
            if entry.ref_count == 0:
                self._evictable[entry.block_hash] = entry

    def publish(self, block_hash: bytes, blocks: tuple[int, ...]) -> CachedBlock | None:
        """Cache a request's written block under ``block_hash``, held by that request; None
        when the hash is already cached (the request keeps its copy private)."""
        if block_hash in self._entries:
            return None
        entry = CachedBlock(block_hash, blocks, 1)
        self._entries[block_hash] = entry
        return entry

    def evict_lru(self) -> tuple[int, ...] | None:
        """Drop the least recently used unreferenced entry; its blocks, or None if none."""
        if not self._evictable:
            return None
        block_hash, entry = self._evictable.popitem(last=False)
        del self._entries[block_hash]
        self.stats.evicted_blocks += len(entry.blocks)
        return entry.blocks

    def entries(self) -> list[CachedBlock]:
        return list(self._entries.values())

    def check(self) -> None:
        """Raise if reference counts or the evictable set disagree with the entries."""
        for h, entry in self._entries.items():
            if entry.block_hash != h or len(entry.blocks) != self.num_planes:
                raise KVIntegrityError(f"prefix cache: entry {entry.blocks} is malformed")
            if entry.ref_count < 0:
                raise KVIntegrityError(f"prefix cache: negative reference count {entry.blocks}")
            if (entry.ref_count == 0) != (h in self._evictable):
                raise KVIntegrityError(
                    f"prefix cache: entry {entry.blocks} with {entry.ref_count} references "
                    "is misfiled as (un)evictable"
                )
        if any(h not in self._entries for h in self._evictable):
            raise KVIntegrityError("prefix cache: an evictable block is not cached")
