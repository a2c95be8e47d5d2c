"""StableSeeds gives stable_seed's values from kept per-request hashes, also after it drops
them."""

from __future__ import annotations

from engine.core import stable_seeds
from engine.core.exits import stable_seed
from engine.core.stable_seeds import StableSeeds


def test_the_same_values_as_stable_seed() -> None:
    seeds = StableSeeds(7, "token")
    for rid in ("r0", "req-'quoted'", "ünïcode", ""):
        for pos in (0, 1, 17, 4095, 10**12):
            assert seeds.at(rid, pos) == stable_seed(7, "token", rid, pos)
            for depth in (0, 3):
                assert seeds.at_depth(rid, pos, depth) == stable_seed(7, "token", rid, pos, depth)
    single = StableSeeds(5)  # a one-part prefix: "(5," must not be cut to "(5"
    assert single.at("r", 2) == stable_seed(5, "r", 2)


def test_the_same_values_after_dropping_the_kept_hashes() -> None:
    seeds = StableSeeds(1, "signal")
    ids = [f"r{i}" for i in range(stable_seeds._MAX_REQUESTS + 10)]
    first = [seeds.at_depth(rid, 3, 1) for rid in ids]
    assert len(seeds._heads) < stable_seeds._MAX_REQUESTS
    assert [seeds.at_depth(rid, 3, 1) for rid in ids] == first
    assert first[-1] == stable_seed(1, "signal", ids[-1], 3, 1)


def test_kept_key_tails_give_stable_seed_on_many_keys() -> None:
    """Positions out of order, past the kept range and negative; depths past the stride."""
    seeds = StableSeeds(3, "signal")
    positions = [0, 5, 2, 300, 299, 1, stable_seeds._MAX_CACHED_POSITION - 1,
                 stable_seeds._MAX_CACHED_POSITION, 10**9, -1, -17]
    depths = [0, 1, 3, stable_seeds._DEPTH_STRIDE - 1, stable_seeds._DEPTH_STRIDE, 40, -1]
    for rid in ("r0", "r1", "x" * 200):
        for pos in positions + positions:  # the second pass reads the kept tails
            assert seeds.at(rid, pos) == stable_seed(3, "signal", rid, pos)
            for depth in depths:
                assert seeds.at_depth(rid, pos, depth) == stable_seed(3, "signal", rid, pos,
                                                                      depth)
    for i in range(3000):
        rid, pos, depth = f"q{i % 37}", (i * 7919) % 5000, i % 5
        assert seeds.at(rid, pos) == stable_seed(3, "signal", rid, pos)
        assert seeds.at_depth(rid, pos, depth) == stable_seed(3, "signal", rid, pos, depth)
