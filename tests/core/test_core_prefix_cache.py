"""Prefix caching bookkeeping: chained hashes, every-plane entries, refcounts, LRU eviction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import BlockManager, CacheConfig, KVIntegrityError
from engine.core.prefix_cache import hash_prompt_blocks, root_hash

D = 4
ROOT = root_hash("test")


def manager(num_blocks: int = 64, block_size: int = 4, **kw: object) -> BlockManager:
    cache = CacheConfig(num_blocks=num_blocks, block_size=block_size,
                        enable_prefix_caching=True, **kw)  # type: ignore[arg-type]
    return BlockManager(cache, D)


def compute(bm: BlockManager, key: tuple[str, int], prompt: list[int], lifetime: int) -> int:
    """Admit ``prompt`` with its cached prefix, write the rest of it on every plane, publish."""
    hashes = hash_prompt_blocks(prompt, bm.block_size, ROOT)
    hit = bm.cached_prefix(hashes, len(prompt))
    assert bm.allocate(key, lifetime, lifetime, hit)
    start = len(hit) * bm.block_size
    for d in range(D):
        bm.mark_written(key, d, start, len(prompt))
    bm.publish(key, hashes, len(prompt))
    bm.check_integrity()
    return start


def test_hashes_chain_over_full_blocks_only() -> None:
    a = hash_prompt_blocks(list(range(10)), 4, ROOT)
    assert len(a) == 2  # the partial third block has no hash
    assert a == hash_prompt_blocks(list(range(10)), 4, ROOT)
    b = hash_prompt_blocks([99, *range(1, 10)], 4, ROOT)
    assert a[0] != b[0] and a[1] != b[1]  # a change in block 0 changes every later hash
    c = hash_prompt_blocks([*range(4), 4, 5, 6, 99], 4, ROOT)
    assert a[0] == c[0] and a[1] != c[1]
    assert hash_prompt_blocks(list(range(8)), 4, root_hash("other"))[0] != a[0]


def test_hit_shares_every_plane_and_survives_the_publisher() -> None:
    bm = manager()
    prompt = list(range(10))
    assert compute(bm, ("a", 0), prompt, 12) == 0
    assert bm.num_cached_blocks == 2 * D
    hit = bm.cached_prefix(hash_prompt_blocks(prompt, 4, ROOT), len(prompt))
    assert len(hit) == 2
    assert bm.allocate(("b", 1), 12, 12, hit)
    for d in range(D):
        ta, tb = bm.block_table(("a", 0), d), bm.block_table(("b", 1), d)
        assert ta[:2] == tb[:2] and ta[2] != tb[2]
        assert bm.written(("b", 1), d) == 8
    assert bm.num_used_blocks == 3 * D + 1 * D  # a: 3 per plane; b: its own third block
    bm.check_integrity()
    bm.free(("a", 0))  # the publisher leaves; b still holds the entries
    assert bm.num_cached_blocks == 2 * D and bm.num_used_blocks == 3 * D
    bm.check_integrity()
    bm.free(("b", 1))
    assert bm.num_used_blocks == 0 and bm.num_cached_blocks == 2 * D
    assert bm.num_free_blocks == bm.num_blocks  # cached-unreferenced counts as free
    bm.check_integrity()


def test_whole_prompt_hit_recomputes_the_last_block() -> None:
    bm = manager()
    prompt = list(range(8))  # exactly two blocks
    compute(bm, ("a", 0), prompt, 8)
    hashes = hash_prompt_blocks(prompt, 4, ROOT)
    assert len(bm.cached_prefix(hashes, 8)) == 1  # the last token's block is computed again
    longer = hash_prompt_blocks(prompt + [5], 4, ROOT)
    assert len(bm.cached_prefix(longer, 9)) == 2  # only token 8 left to compute


def test_publish_needs_every_plane_written() -> None:
    bm = manager()
    prompt = list(range(8))
    hashes = hash_prompt_blocks(prompt, 4, ROOT)
    bm.allocate(("a", 0), 8, 8)
    for d in range(D - 1):
        bm.mark_written(("a", 0), d, 0, 8)
    with pytest.raises(KVIntegrityError, match="every plane"):
        bm.publish(("a", 0), hashes, 8)
    bm.mark_written(("a", 0), D - 1, 0, 8)
    bm.publish(("a", 0), hashes[:1], 8)
    assert bm.is_shared(("a", 0), 0) and not bm.is_shared(("a", 0), 1)


def test_shared_blocks_are_never_written_or_finalized_into() -> None:
    bm = manager()
    compute(bm, ("a", 0), list(range(9)), 12)
    with pytest.raises(KVIntegrityError, match="shared block"):
        bm.mark_written(("a", 0), 0, 2, 5)
    with pytest.raises(KVIntegrityError, match="shared block"):
        bm.mark_token(bm.allocation(("a", 0)), 1, 7)
    with pytest.raises(KVIntegrityError, match="shared block"):
        bm.finalize(bm.allocation(("a", 0)), 3, 0)
    bm.mark_token(bm.allocation(("a", 0)), 0, 9)  # a decode position past the prompt is private
    assert bm.finalize(bm.allocation(("a", 0)), 9, 0) == (1, 2, 3)


def test_duplicate_block_stays_private() -> None:
    bm = manager()
    prompt = list(range(8))
    hashes = hash_prompt_blocks(prompt, 4, ROOT)
    for key in (("a", 0), ("b", 1)):  # both computed before either published
        bm.allocate(key, 8, 8)
        for d in range(D):
            bm.mark_written(key, d, 0, 8)
    bm.publish(("a", 0), hashes, 8)
    bm.publish(("b", 1), hashes, 8)
    assert bm.is_shared(("a", 0), 0) and not bm.is_shared(("b", 1), 0)
    bm.free(("b", 1))
    bm.free(("a", 0))
    assert bm.num_cached_blocks == 2 * D
    bm.check_integrity()


def test_eviction_is_lru_tail_first_and_only_on_demand() -> None:
    bm = manager(num_blocks=6 * D)
    compute(bm, ("a", 0), [1] * 9, 12)  # 2 cached blocks + 1 private per plane
    compute(bm, ("b", 1), [2] * 9, 12)
    bm.free(("a", 0))
    bm.free(("b", 1))
    pc = bm.prefix_cache
    assert pc is not None and bm.num_cached_blocks == 4 * D and pc.stats.evicted_blocks == 0
    assert bm.allocate(("c", 2), 8, 8)  # 2 free blocks per plane: nothing evicted
    assert pc.stats.evicted_blocks == 0
    assert bm.allocate(("d", 3), 4, 4)  # one more per plane: a's tail block goes first
    assert pc.stats.evicted_blocks == D
    assert len(bm.cached_prefix(hash_prompt_blocks([1] * 9, 4, ROOT), 9)) == 1
    assert len(bm.cached_prefix(hash_prompt_blocks([2] * 9, 4, ROOT), 9)) == 2
    bm.check_integrity()


def test_hitting_an_unheld_entry_counts_against_free_capacity() -> None:
    bm = manager(num_blocks=3 * D)
    compute(bm, ("a", 0), [1] * 9, 12)
    bm.free(("a", 0))  # 2 cached (evictable) + 1 free per plane
    hit = bm.cached_prefix(hash_prompt_blocks([1] * 9, 4, ROOT), 9)
    assert len(hit) == 2 and bm.num_free_blocks == 3 * D
    assert not bm.allocate(("b", 1), 16, 16, hit)  # 2 new blocks per plane do not fit
    assert bm.num_free_blocks == 3 * D and not bm.holds(("b", 1))
    assert bm.allocate(("b", 1), 12, 12, hit)  # one new block per plane does
    assert bm.num_free_blocks == 0
    bm.check_integrity()


def test_reservation_counts_only_blocks_still_needed() -> None:
    bm = manager(num_blocks=64)
    compute(bm, ("a", 0), list(range(12)), 12)
    hit = bm.cached_prefix(hash_prompt_blocks(list(range(13)), 4, ROOT), 13)
    assert len(hit) == 3
    assert bm.allocate(("b", 1), 16, 20, hit)  # claim up to 16 tokens, lifetime 20
    assert bm.capacity_tokens(("b", 1)) == 16 and bm.num_reserved_blocks == 1 * D
    bm.check_integrity()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["admit", "free"]), st.integers(0, 5),
                          st.integers(0, 2), st.integers(1, 14), st.integers(0, 6)),
                max_size=40))
def test_integrity_holds_under_random_sharing(ops: list[tuple[str, int, int, int, int]]) -> None:
    bm = manager(num_blocks=12 * D)
    pc = bm.prefix_cache
    assert pc is not None
    for op, rid, prefix, length, extra in ops:
        key = (f"r{rid}", rid)
        if op == "admit" and not bm.holds(key):
            prompt = [prefix] * length  # three families of shared prefixes
            hashes = hash_prompt_blocks(prompt, 4, ROOT)
            hit = bm.cached_prefix(hashes, len(prompt))
            refs = [e.ref_count for e in hit]
            before = (bm.num_free_blocks, bm.num_used_blocks, bm.num_cached_blocks)
            if not bm.allocate(key, length, length + extra, hit):
                assert (bm.num_free_blocks, bm.num_used_blocks, bm.num_cached_blocks) == before
                assert [e.ref_count for e in hit] == refs
            else:
                assert all(e.ref_count == r + 1 for e, r in zip(hit, refs, strict=True))
                for d in range(D):
                    bm.mark_written(key, d, len(hit) * 4, length)
                bm.publish(key, hashes, length)
        elif op == "free":
            bm.free(key)
        bm.check_integrity()
        assert all(e.ref_count >= 0 for e in pc.entries())
    for rid in range(6):
        bm.free((f"r{rid}", rid))
    assert bm.num_used_blocks == 0 and bm.num_reserved_blocks == 0
    assert all(e.ref_count == 0 for e in pc.entries())
    bm.check_integrity()
