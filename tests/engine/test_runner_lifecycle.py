"""Prompt-state handles, request states and KV blocks all return: finish, abort mid-prompt,
injected batch failure and request-id reuse."""

from __future__ import annotations

import pytest

from engine.core import Batch, SamplingParams, Stage
from engine.llm import LLM
from tests.reference.fixtures import ARMS, make_llm, outputs_key, serial, tiny_model

PROMPTS = [list(range(1, 20)), [5, 6, 7], list(range(30, 42)), [9, 8, 7, 6, 5]]
PARAMS = SamplingParams(max_tokens=5)


def _assert_all_returned(llm: LLM) -> None:
    llm.drain()
    assert llm.core.block_manager.num_used_blocks == 0
    assert llm.core.block_manager.num_reserved_blocks == 0
    assert llm.core.prompt_states.num_in_use == 0
    assert llm.runner.prompt_states.num_in_use == 0
    assert llm.runner.decode_states.num_in_use == 0
    llm.core.block_manager.check_integrity()


def _run_to_end(llm: LLM, max_steps: int = 2000) -> None:
    for _ in range(max_steps):
        if not llm.core.has_work():
            return
        llm.step()
    raise AssertionError("did not drain")


@pytest.mark.parametrize("arm", ARMS)
def test_everything_returns_after_normal_finish(arm: str) -> None:
    llm = make_llm(tiny_model(), arm)
    outs = llm.generate(PROMPTS, PARAMS)
    assert all(o.finish_reason == "length" and len(o.output_token_ids) == 5 for o in outs)
    _assert_all_returned(llm)


@pytest.mark.parametrize("arm", ["per_depth", "mixed", "wavefront"])
def test_abort_mid_prompt_returns_handles_and_blocks(arm: str) -> None:
    llm = make_llm(tiny_model(), arm)
    ids = [llm.add_request(p, PARAMS) for p in PROMPTS]
    victim = llm.core.requests[ids[0]]
    for _ in range(200):
        llm.step()
        item = victim.prompt_item
        if item is not None and 1 <= item.depth < 4 and llm.runner.prompt_states.num_in_use:
            break
        # the wavefront arm: two chunks in flight, each holding a written state
        if len(victim.prompt_chunks) > 1 and llm.runner.prompt_states.num_in_use > 1:
            break
    else:
        raise AssertionError("the long prompt never sat between depths")
    assert victim.stage is Stage.PREFILL
    assert llm.abort(ids[0])
    _run_to_end(llm)
    finished = {r.request_id: r.finish_reason for r in llm.pop_finished()}
    assert finished[ids[0]] == "abort" and finished[ids[1]] == "length"
    _assert_all_returned(llm)


@pytest.mark.parametrize("arm", ARMS)
def test_injected_batch_failure_fails_its_requests_and_others_are_unaffected(arm: str) -> None:
    model = tiny_model()
    clean = outputs_key(make_llm(model, arm).generate(PROMPTS, PARAMS))
    failed_stages = set()
    for fail_step in (1, 4, 9, 15):
        llm = make_llm(model, arm)
        llm.runner.fail_on_step = fail_step
        failed: list[Batch] = []
        inner = llm.runner.execute

        def execute(batch: Batch, _inner=inner, _failed=failed):  # type: ignore[no-untyped-def]
            try:
                return _inner(batch)
            except RuntimeError:
                _failed.append(batch)
                raise

        llm.runner.execute = execute  # type: ignore[method-assign]
        ids = [llm.add_request(p, PARAMS) for p in PROMPTS]
        _run_to_end(llm)
        assert [b.step for b in failed] == [fail_step]
        failed_stages.add(failed[0].stage)
        failed_ids = {it.request_id for it in failed[0].items}
        done = {r.request_id: r for r in llm.pop_finished()}
        for i, rid in enumerate(ids):
            req = done[rid]
            if rid in failed_ids:
                assert req.finish_reason == "error"
            else:
                assert (req.output_token_ids, req.exit_depths) == clean[i]
        _assert_all_returned(llm)
    assert len(failed_stages) >= 2


@pytest.mark.parametrize("arm", ARMS)
def test_request_id_reuse_never_touches_the_old_state(arm: str) -> None:
    model = tiny_model()
    llm = make_llm(model, arm)
    llm.add_request(PROMPTS[0], PARAMS, request_id="a")
    llm.add_request(PROMPTS[1], PARAMS, request_id="b")
    old = llm.core.requests["a"]
    while old.stage is not Stage.PREFILL or old.num_prefilled_tokens == 0:
        llm.step()
    llm.abort("a")  # mid-prompt: it holds a prompt state and planes
    new_prompt = [11, 12, 13, 14, 15, 16, 17, 18, 19]
    llm.add_request(new_prompt, PARAMS, request_id="a")
    _run_to_end(llm)
    done = [r for r in llm.pop_finished() if r.request_id == "a"]
    assert [r.finish_reason for r in done] == ["abort", "length"]
    assert (done[1].output_token_ids, done[1].exit_depths) == serial(
        model, [new_prompt], [PARAMS]
    )[0]
    _assert_all_returned(llm)
