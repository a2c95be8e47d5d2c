"""``n > 1`` without prefix caching: the samples share sample 0's prefill, within the group."""

from __future__ import annotations

import dataclasses

import pytest

from engine.core import SamplingParams
from engine.llm import LLM
from tests.reference.fixtures import ARMS, HiddenRecorder, make_llm, tiny_model

# 17 tokens: four full blocks of 4 shared, the last token recomputed by every sample.
PROMPT = list(range(1, 18))
BASE = SamplingParams(max_tokens=6, temperature=1.0, seed=11)


def _prompt_positions(rec: HiddenRecorder, request_id: str) -> set[int]:
    """Prompt positions the runner computed for ``request_id`` (any depth)."""
    return {pos for rid, pos, _ in rec.rows if rid == request_id and pos < len(PROMPT)}


def _run(llm: LLM, params: SamplingParams) -> tuple[HiddenRecorder, list[list[int]]]:
    rec = HiddenRecorder()
    llm.runner.hidden_hook = rec
    out = llm.generate([PROMPT], params)[0]
    return rec, [o.output_token_ids for o in out.outputs]


@pytest.mark.parametrize("arm", ARMS)
def test_later_samples_run_only_the_prompt_tail_and_return_every_block(arm: str) -> None:
    llm = make_llm(tiny_model(), arm)
    bm = llm.core.block_manager
    assert bm.prefix_cache is None
    rec, tokens = _run(llm, dataclasses.replace(BASE, n=3))
    assert _prompt_positions(rec, "0-0") == set(range(17))
    assert _prompt_positions(rec, "0-1") == _prompt_positions(rec, "0-2") == {16}
    singles = make_llm(tiny_model(), arm).generate(
        [PROMPT] * 3, [dataclasses.replace(BASE, seed=11 + i) for i in range(3)])
    assert tokens == [s.output_token_ids for s in singles]
    # The group's blocks all return to the pool: nothing stays cached or held.
    bm.check_integrity()
    assert bm.num_used_blocks == 0 and bm.num_free_blocks == bm.num_blocks
    assert bm._pc is not None and bm._pc.num_entries == 0
    # Scoped to the group: a later request and a later group with the same prompt find
    # nothing, and no prefix-cache stats exist.
    rec, _ = _run(llm, BASE)
    assert _prompt_positions(rec, "1") == set(range(17))
    rec, _ = _run(llm, dataclasses.replace(BASE, n=2))
    assert _prompt_positions(rec, "2-0") == set(range(17))
    assert _prompt_positions(rec, "2-1") == {16}
    assert bm.prefix_cache is None and bm.num_used_blocks == 0


def test_shared_layout_samples_each_run_their_prefill() -> None:
    llm = make_llm(tiny_model(), "atomic", layout="shared")
    rec, tokens = _run(llm, dataclasses.replace(BASE, n=2))
    assert _prompt_positions(rec, "0-0") == _prompt_positions(rec, "0-1") == set(range(17))
    singles = make_llm(tiny_model(), "atomic", layout="shared").generate(
        [PROMPT] * 2, [dataclasses.replace(BASE, seed=11 + i) for i in range(2)])
    assert tokens == [s.output_token_ids for s in singles]
    assert llm.core.block_manager.num_used_blocks == 0
