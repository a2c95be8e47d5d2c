"""Without prefix caching, a request group (the n samples of one prompt) shares its prompt
blocks with itself only, and gives them back once no member holds them."""

from __future__ import annotations

from engine.core import BlockManager, CacheConfig

D = 4
PROMPT = list(range(10))  # two full blocks of 4, then a partial one


def manager(**kw: object) -> BlockManager:
    return BlockManager(CacheConfig(num_blocks=64, block_size=4, **kw), D)  # type: ignore[arg-type]


def write_prompt(bm: BlockManager, key: tuple[str, int], hashes: list[bytes]) -> None:
    hit = bm.cached_prefix(hashes, len(PROMPT))
    assert bm.allocate(key, 12, 12, hit)
    for d in range(D):
        bm.mark_written(key, d, len(hit) * bm.block_size, len(PROMPT))
    bm.publish(key, hashes, len(PROMPT))
    bm.check_integrity()


def test_a_group_shares_its_prompt_blocks_only_while_a_member_holds_them() -> None:
    bm = manager()
    assert bm.prefix_cache is None and bm.block_hashes(PROMPT) == []
    g = bm.block_hashes(PROMPT, "g")
    assert len(g) == 2 and g != bm.block_hashes(PROMPT, "h")
    write_prompt(bm, ("g-0", 0), g)
    assert bm.cached_prefix(bm.block_hashes(PROMPT, "h"), len(PROMPT)) == []  # other groups
    hit = bm.cached_prefix(g, len(PROMPT))
    assert len(hit) == 2
    assert bm.allocate(("g-1", 1), 12, 12, hit)
    for d in range(D):
        assert bm.block_table(("g-0", 0), d)[:2] == bm.block_table(("g-1", 1), d)[:2]
        assert bm.written(("g-1", 1), d) == 8
    assert bm.num_used_blocks == 3 * D + 1 * D and bm.num_cached_blocks == 0
    bm.free(("g-0", 0))  # the leader leaves; its entries stay while g-1 holds them
    assert len(bm.cached_prefix(g, len(PROMPT))) == 2
    bm.check_integrity()
    bm.free(("g-1", 1))
    bm.check_integrity()
    assert bm.num_used_blocks == 0 and bm.num_free_blocks == bm.num_blocks
    assert bm.cached_prefix(g, len(PROMPT)) == []  # nothing kept after the group


def test_the_shared_layout_shares_nothing() -> None:
    assert manager(layout="shared").block_hashes(PROMPT, "g") == []
