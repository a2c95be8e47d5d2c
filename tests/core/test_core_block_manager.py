"""Block manager: per-plane tables, atomic claims, written-prefix and finalize bookkeeping."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import BlockManager, CacheConfig, KVIntegrityError


def test_admission_is_atomic_and_counts_all_depths() -> None:
    bm = BlockManager(CacheConfig(num_blocks=20, block_size=4), num_depths=4)
    assert bm.blocks_for(5) == 8  # 2 blocks per plane x 4 planes
    assert bm.allocate(("a", 0), 5, 5)
    assert bm.num_free_blocks == 12
    assert not bm.allocate(("b", 1), 13, 13)  # needs 16
    assert bm.num_free_blocks == 12 and not bm.holds(("b", 1))
    bm.check_integrity()
    tables = [bm.block_table(("a", 0), d) for d in range(4)]
    assert all(len(t) == 2 for t in tables)
    assert len({b for t in tables for b in t}) == 8  # planes never share a block


def test_reservation_and_growth() -> None:
    bm = BlockManager(CacheConfig(num_blocks=24, block_size=4), num_depths=4)
    assert bm.allocate(("a", 0), 4, 16)  # claim 1 per plane, reserve 3 more per plane
    assert bm.num_used_blocks == 4 and bm.num_reserved_blocks == 12 and bm.num_free_blocks == 8
    assert not bm.allocate(("b", 1), 12, 12)  # 12 blocks > 8 unpromised
    assert bm.ensure_capacity(("a", 0), 9)
    assert bm.capacity_tokens(("a", 0)) == 12 and bm.num_reserved_blocks == 4
    bm.free(("a", 0))
    assert bm.num_free_blocks == 24 and bm.num_reserved_blocks == 0
    bm.check_integrity()


def test_written_prefix_and_finalize() -> None:
    bm = BlockManager(CacheConfig(num_blocks=64, block_size=4), num_depths=4)
    key = ("a", 0)
    bm.allocate(key, 8, 8)
    for d in range(4):
        bm.mark_written(key, d, 0, 5)  # prompt at every depth
    with pytest.raises(KVIntegrityError, match="history"):
        bm.mark_written(key, 1, 6, 7)  # a gap at position 5
    bm.mark_written(key, 0, 5, 6)  # decode token runs depth 0 only, then exits
    assert bm.finalize(bm.allocation(key), 5, 0) == (1, 2, 3)
    assert [bm.written(key, d) for d in range(4)] == [6, 6, 6, 6]
    with pytest.raises(KVIntegrityError, match="finalizing"):
        bm.finalize(bm.allocation(key), 5, 0)  # twice is a bug
    with pytest.raises(KVIntegrityError, match="capacity"):
        bm.mark_written(key, 0, 6, 9)


def test_shared_layout_has_one_plane() -> None:
    bm = BlockManager(CacheConfig(num_blocks=8, block_size=4, layout="shared"), num_depths=4)
    assert bm.blocks_for(8) == 2
    bm.allocate(("a", 0), 8, 8)
    assert bm.block_table(("a", 0), 0) is bm.block_table(("a", 0), 3)
    assert bm.finalize(bm.allocation(("a", 0)), 0, 0) == ()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["alloc", "grow", "free"]), st.integers(0, 5),
                          st.integers(1, 40)), max_size=40))
def test_integrity_holds_under_random_operations(ops: list[tuple[str, int, int]]) -> None:
    bm = BlockManager(CacheConfig(num_blocks=48, block_size=4), num_depths=4)
    for op, rid, n in ops:
        key = (f"r{rid}", rid)
        before = (bm.num_free_blocks, bm.num_used_blocks)
        if op == "alloc" and not bm.holds(key):
            if not bm.allocate(key, n // 2, n):
                assert (bm.num_free_blocks, bm.num_used_blocks) == before  # atomic failure
        elif op == "grow" and bm.holds(key):
            if not bm.ensure_capacity(key, n):
                assert (bm.num_free_blocks, bm.num_used_blocks) == before
        elif op == "free":
            bm.free(key)
        bm.check_integrity()
