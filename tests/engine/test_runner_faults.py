"""A failed execute that never reached the runner's housekeeping,
and an abort between ``schedule`` and ``execute``. Only the failed batch's requests may end
with ``error``, and every pool is whole afterwards."""

from __future__ import annotations

import pytest

from engine.core import Batch, SamplingParams, StepResult
from engine.llm import LLM
from tests.reference.fixtures import ARMS, make_llm, outputs_key, tiny_model

PARAMS = SamplingParams(max_tokens=6, ignore_eos=True)


def _prompt(k: int, s: int) -> list[int]:
    return [(s * 7 + i * 3) % 64 for i in range(k)]


PROMPTS = [_prompt(10 + 17 * i, i) for i in range(6)]


def assert_whole(llm: LLM) -> None:
    llm.drain()
    bm = llm.core.block_manager
    assert bm.num_used_blocks == 0 and bm.num_reserved_blocks == 0
    assert llm.core.prompt_states.num_in_use == 0
    assert llm.runner.prompt_states.num_in_use == 0
    assert llm.runner.decode_states.num_in_use == 0
    bm.check_integrity()


def _engine(arm: str) -> LLM:
    return LLM(tiny_model(), arm=arm, max_num_seqs=4, max_num_batched_tokens=64,
               prefill_chunk_size=16, num_blocks=256)


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("fail_at", [2, 5, 9])
def test_a_failure_before_housekeeping_loses_nothing(arm: str, fail_at: int) -> None:
    clean = outputs_key(_engine(arm).generate(PROMPTS, PARAMS))
    llm = _engine(arm)
    real, calls, failed = llm.runner.execute, [0], []

    def flaky(batch: Batch) -> StepResult:
        calls[0] += 1
        if calls[0] == fail_at:
            failed.append(batch)
            raise RuntimeError("transient device error")  # before the runner saw anything
        return real(batch)

    llm.runner.execute = flaky  # type: ignore[method-assign]
    outs = llm.generate(PROMPTS, PARAMS)
    failed_ids = {it.request_id for it in failed[0].items}
    for i, out in enumerate(outs):
        if out.request_id in failed_ids:
            assert out.finish_reason == "error"
        else:
            assert (out.output_token_ids, out.exit_depths) == clean[i], out.request_id
    assert_whole(llm)
    assert llm.generate([PROMPTS[5]], PARAMS)[0].finish_reason == "length"
    assert_whole(llm)


@pytest.mark.parametrize("arm", ARMS)
def test_abort_between_schedule_and_execute_fails_nothing_else(arm: str) -> None:
    model = tiny_model()
    clean = outputs_key(make_llm(model, arm).generate(PROMPTS[:4], PARAMS))
    aborted_in: set[str] = set()
    for victim_step in range(0, 40, 3):
        llm = make_llm(model, arm)
        ids = [llm.add_request(p, PARAMS) for p in PROMPTS[:4]]
        real = llm.runner.execute
        victim: list[str] = []

        def execute(batch: Batch, _real=real, _llm=llm, _v=victim,
                    _step=victim_step) -> StepResult:
            if batch.step == _step and not _v and batch.items:
                _v.append(batch.items[0].request_id)
                assert _llm.abort(_v[0])  # the client went away after schedule()
                aborted_in.add(batch.stage.value)
            return _real(batch)

        llm.runner.execute = execute  # type: ignore[method-assign]
        for _ in range(2000):
            if not llm.core.has_work():
                break
            llm.step()
        done = {r.request_id: r for r in llm.pop_finished()}
        for i, rid in enumerate(ids):
            if victim and rid == victim[0]:
                assert done[rid].finish_reason == "abort"
            else:
                assert done[rid].finish_reason == "length", (victim_step, done[rid].error)
                assert (done[rid].output_token_ids, done[rid].exit_depths) == clean[i]
        assert_whole(llm)
    assert len(aborted_in) >= 2
