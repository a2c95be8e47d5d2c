"""The CPU runner with prefix caching gives the tokens and exit depths it gives without
(tiny model, fp32), for every arm, fixed and adaptive exits."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from engine.core import ExitConfig, SamplingParams
from engine.llm import LLM
from tests.reference.fixtures import ARMS, make_llm, outputs_key, tiny_model

SYSTEM = [11, 3, 52, 7, 19, 23, 40, 2, 9, 33, 61, 5]  # 3 blocks of 4
E = SYSTEM + [40, 41, 42, 43]  # 4 full blocks
B = SYSTEM + [50, 51, 52, 53, 54]
ROUND_1 = [E, B, [9, 8, 7, 6, 5]]  # E and B compute SYSTEM at the same time
ROUND_2 = [
    E,  # whole-prompt hit: 3 blocks cached, the last block computed again
    SYSTEM + [60, 61],  # the hit ends mid-prompt on a block boundary
    B + [57, 58, 59],  # B's 4 full blocks
    SYSTEM[:6] + [1, 2, 3, 4, 5],  # one block
]
ROUND_2_HITS = 12 + 12 + 16 + 4
EXITS = {"fixed": ExitConfig(), "ouro": ExitConfig(mode="ouro", exit_threshold=0.5)}


def params(n: int) -> list[SamplingParams]:
    """Greedy and seeded-sampling requests."""
    return [
        SamplingParams(max_tokens=5,
                       **(dict(temperature=0.9, top_k=20, seed=7 + i) if i % 2 else {}))
        for i in range(n)
    ]


def rounds(llm: LLM, prompts: Sequence[Sequence[Sequence[int]]]) -> list:
    """Each round's prompts submitted together, the rounds one after another."""
    return [outputs_key(llm.generate(list(r), params(len(r)))) for r in prompts]


@pytest.mark.parametrize("exit_mode", list(EXITS))
@pytest.mark.parametrize("arm", ARMS)
def test_cached_and_uncached_runs_agree(arm: str, exit_mode: str) -> None:
    model = tiny_model(gate_std=0.6)
    cached = make_llm(model, arm, EXITS[exit_mode], enable_prefix_caching=True)
    pc = cached.core.block_manager.prefix_cache
    assert pc is not None
    got = rounds(cached, [ROUND_1])
    assert pc.stats.hit_tokens == 0  # nothing was published before both had computed it
    got += rounds(cached, [ROUND_2])
    assert pc.stats.hit_tokens == ROUND_2_HITS
    expected = rounds(make_llm(model, arm, EXITS[exit_mode]), [ROUND_1, ROUND_2])
    assert got == expected
    if exit_mode == "ouro":
        assert min(d for _, depths in got[1] for d in depths) < 4  # adaptive exits happened
    assert cached.core.block_manager.num_used_blocks == 0
    cached.core.block_manager.check_integrity()


@pytest.mark.parametrize("arm", ARMS)
def test_eviction_under_a_small_pool(arm: str) -> None:
    model = tiny_model(gate_std=0.6)
    f1, f2, f3 = ([f * 10 + i for i in range(12)] for f in range(1, 4))
    # One request's lifetime takes 20 of the 32 blocks: the third family evicts the first.
    prompts = [[f1 + [60]], [f1 + [61]], [f2 + [60]], [f3 + [60]], [f1 + [62]],
               [f3 + [61], f3 + [62]]]
    exit_cfg = EXITS["ouro"]
    kw: dict[str, object] = dict(num_blocks=32, max_num_seqs=2)
    cached = make_llm(model, arm, exit_cfg, enable_prefix_caching=True, **kw)
    pc = cached.core.block_manager.prefix_cache
    assert pc is not None
    got, hits, evicted = [], [], []
    for r in prompts:
        before = pc.stats.hit_tokens
        got += rounds(cached, [r])
        hits.append(pc.stats.hit_tokens - before)
        evicted.append(pc.stats.evicted_blocks)
    assert hits == [0, 12, 0, 0, 0, 24]  # f1 hit, then evicted by f3 (LRU); f3 hit twice
    assert evicted[:3] == [0, 0, 0] and evicted[3] == 12
    assert got == rounds(make_llm(model, arm, exit_cfg, **kw), prompts)
    cached.core.block_manager.check_integrity()
