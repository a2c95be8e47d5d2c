"""RFC §2 claims with inputs where breaking them changes the result: decode items get the
budget first, and prompt selection stops at the first item that does not fit."""

from __future__ import annotations

from engine.core import EngineCore, ItemKind, SamplingParams, Stage
from engine.core.seeded_executor import SeededExecutor
from tests.helpers import make_config


def test_decode_items_take_the_budget_before_prompt_items() -> None:
    # Guard: chunk 8 + 4 seqs - 1 = 11. Prompt items of 8 and 2 tokens would leave one row
    # for the two decoders if prompts went first; decode-first keeps both decoders.
    core = EngineCore(make_config("mixed", max_num_seqs=4, max_num_batched_tokens=11,
                                  prefill_chunk_size=8))
    ex = SeededExecutor()
    for i in range(2):
        core.add_request(f"d{i}", [1, 2], SamplingParams(max_tokens=40, ignore_eos=True), 0.0)
    now, contested = 0.0, 0
    for k in range(200):
        if k == 6:
            core.add_request("p", list(range(16)), SamplingParams(max_tokens=1), now)
            core.add_request("q", [4, 5], SamplingParams(max_tokens=1), now)
        ready = {r for r in ("d0", "d1")
                 if r in core.requests and core.requests[r].stage is Stage.RECURRENT}
        batch = core.schedule(now)
        if batch is None:
            break
        prompts = [it for it in batch.items if it.kind is ItemKind.PROMPT]
        if batch.stage is Stage.RECURRENT and ready:
            decode = {it.request_id for it in batch.items if it.kind is ItemKind.DECODE}
            assert decode == ready, (batch.step, decode, ready)
            assert [it.kind for it in batch.items] == sorted(
                (it.kind for it in batch.items), key=lambda kind: kind is ItemKind.PROMPT)
            if sum(it.num_tokens for it in prompts) + len(ready) > 9:
                contested += 1
        core.apply(batch, ex.execute(batch), now + 1)
        now += 1
    assert contested, "no step where the prompt items wanted more than the decoders left"


def test_prompt_selection_stops_at_the_first_item_that_does_not_fit() -> None:
    core = EngineCore(make_config("per_depth", max_num_batched_tokens=16, prefill_chunk_size=8))
    core.add_request("big", list(range(8)), SamplingParams(max_tokens=1), 0.0)
    core.add_request("small", [1, 2, 3], SamplingParams(max_tokens=1), 0.0)
    s = core.scheduler
    s.admit()
    assert s.take_prompts(7) == []  # "small" (3) would fit 7, but never jumps the head
    assert [it.request_id for it in s.take_prompts(11)] == ["big", "small"]
