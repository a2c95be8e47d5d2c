"""Prompt-state handles and KV blocks return on every path; late results never leak."""

from __future__ import annotations

import pytest

from engine.core import (
    Batch,
    EngineCore,
    ExitConfig,
    ItemKind,
    RecurrentResult,
    RequestStatus,
    SamplingParams,
    Stage,
    StaleResultError,
    StepResult,
)
from engine.core.seeded_executor import SeededExecutor
from tests.helpers import drive, make_config


def _mid_prompt(arm: str = "mixed") -> tuple[EngineCore, SeededExecutor, Batch]:
    core = EngineCore(make_config(arm, max_num_batched_tokens=11, prefill_chunk_size=8))
    ex = SeededExecutor()
    core.add_request("p", list(range(30)), SamplingParams(max_tokens=3), 0.0)
    b = core.schedule(0.0)
    assert b is not None
    core.apply(b, ex.execute(b), 1.0)
    b = core.schedule(1.0)  # depth 1 of the first chunk, in flight
    assert b is not None and b.items[0].kind is ItemKind.PROMPT
    return core, ex, b


def _assert_all_returned(core: EngineCore) -> None:
    assert core.block_manager.num_used_blocks == 0 and core.block_manager.num_reserved_blocks == 0
    assert core.prompt_states.num_in_use == 0
    core.block_manager.check_integrity()


def test_abort_mid_prompt_releases_handle_and_blocks() -> None:
    core, ex, inflight = _mid_prompt()
    handle = inflight.items[0].prompt_state
    assert core.abort("p")
    _assert_all_returned(core)
    hk = core.take_housekeeping()
    assert handle in hk.released_handles and ("p", 0) in hk.released_requests
    # the late result of the in-flight batch is ignored
    assert core.apply(inflight, ex.execute(inflight), 2.0) == []
    assert [r.finish_reason for r in core.pop_finished()] == ["abort"]
    assert not core.abort("p")


def test_batch_failure_finishes_affected_requests_only() -> None:
    core = EngineCore(make_config("mixed", max_num_batched_tokens=11, prefill_chunk_size=8))
    ex = SeededExecutor()
    core.add_request("d", [1, 2], SamplingParams(max_tokens=20), 0.0)
    now = 0.0
    while core.requests["d"].stage is not Stage.RECURRENT:
        b = core.schedule(now)
        assert b is not None
        core.apply(b, ex.execute(b), now + 1)
        now += 1
    core.add_request("p", list(range(20)), SamplingParams(max_tokens=2), now)
    b = core.schedule(now)
    assert b is not None and b.is_mixed
    assert sorted(core.fail(b, "boom")) == ["d", "p"]
    _assert_all_returned(core)
    done = core.pop_finished()
    assert {r.finish_reason for r in done} == {"error"} and {r.error for r in done} == {"boom"}
    assert not core.has_work()


def test_request_id_reuse_is_safe_against_late_results() -> None:
    core, ex, inflight = _mid_prompt()
    core.abort("p")
    fresh = core.add_request("p", list(range(9)), SamplingParams(max_tokens=1), 2.0)
    assert fresh.generation != inflight.items[0].generation
    core.apply(inflight, ex.execute(inflight), 3.0)  # stale: must not advance the new one
    assert fresh.status is RequestStatus.WAITING and fresh.num_prefilled_tokens == 0
    d = drive(core, ex)
    assert [e.request_id for e in d.events if e.finished] == ["p"]
    _assert_all_returned(core)


def test_active_id_cannot_be_added_twice() -> None:
    core = EngineCore(make_config("mixed"))
    core.add_request("x", [1], SamplingParams(max_tokens=1), 0.0)
    with pytest.raises(ValueError, match="request_id"):
        core.add_request("x", [1], SamplingParams(max_tokens=1), 0.0)


def test_finish_of_decode_rows_that_shared_batches_with_prompt_rows() -> None:
    core = EngineCore(make_config("mixed", max_num_batched_tokens=11, prefill_chunk_size=8))
    ex = SeededExecutor()
    core.add_request("d", [1, 2], SamplingParams(max_tokens=6), 0.0)
    core.add_request("p", list(range(40)), SamplingParams(max_tokens=2), 0.0)
    d = drive(core, ex)
    assert any(b.is_mixed for b in d.batches)
    _assert_all_returned(core)
    issued = {it.prompt_state.handle_id for b in d.batches for it in b.items if it.prompt_state}
    assert len(issued) == 1 + 5 and issued <= ex.released_handles  # one per chunk, all freed


def test_result_that_does_not_fit_its_batch_is_rejected() -> None:
    core, ex, inflight = _mid_prompt()
    with pytest.raises(StaleResultError):
        core.apply(inflight, StepResult(inflight.step + 1), 2.0)
    with pytest.raises(StaleResultError):
        core.apply(inflight, StepResult(inflight.step), 2.0)  # RECURRENT needs its type


def test_missing_signal_is_an_interface_error() -> None:
    core = EngineCore(make_config("mixed", exit=ExitConfig(mode="ouro", exit_threshold=0.5)))
    ex = SeededExecutor()
    core.add_request("d", [1], SamplingParams(max_tokens=3), 0.0)
    now = 0.0
    while True:
        b = core.schedule(now)
        assert b is not None
        if b.stage is Stage.RECURRENT and b.needs_signals:
            break
        core.apply(b, ex.execute(b), now + 1)
        now += 1
    with pytest.raises(StaleResultError, match="needs a gate signal"):
        core.apply(b, RecurrentResult(b.step, None), now + 1)


def test_early_exit_finalizes_deeper_planes_and_prompts_never_are() -> None:
    trace = (4, 1, 2, 4)
    core = EngineCore(make_config("mixed", exit=ExitConfig(mode="trace"), block_size=4))
    ex = SeededExecutor()
    core.add_request("t", list(range(5)), SamplingParams(max_tokens=4, exit_trace=trace), 0.0)
    d = drive(core, ex)
    ops = [op for b in d.batches for op in b.housekeeping.finalize]
    # token 1 ran at position 5 for 1 loop, token 2 at position 6 for 2 loops
    assert [(op.position, op.from_depth, op.to_depths) for op in ops] == [
        (5, 0, (1, 2, 3)), (6, 1, (2, 3)),
    ]
    assert all(op.position >= 5 for op in ops)  # prompt positions 0..4 never finalized
    assert [e.exit_depth for e in d.events] == list(trace)


def test_incremental_allocation_grows_with_depth0_work() -> None:
    core = EngineCore(make_config("per_depth", incremental=True, block_size=4,
                                  prefill_chunk_size=8, max_num_batched_tokens=8))
    ex = SeededExecutor()
    core.add_request("r", list(range(20)), SamplingParams(max_tokens=5), 0.0)
    key = ("r", 0)
    b = core.schedule(0.0)
    assert b is not None
    assert core.block_manager.capacity_tokens(key) == 8  # the first chunk only, the rest reserved
    # 24 lifetime tokens -> 6 blocks per plane
    assert core.block_manager.num_reserved_blocks == (6 - 2) * 4
    core.apply(b, ex.execute(b), 1.0)
    used = []
    now = 1.0
    while core.has_work():
        b = core.schedule(now)
        assert b is not None
        used.append(core.block_manager.capacity_tokens(key) if core.block_manager.holds(key) else 0)
        core.apply(b, ex.execute(b), now + 1)
        now += 1
    assert used == sorted(used) and max(used) == 24
    _assert_all_returned(core)


def test_executors_satisfy_the_protocol() -> None:
    from engine.core import Executor

    def run_one(ex: Executor) -> None:
        core = EngineCore(make_config("mixed"))
        core.add_request("a", [1, 2], SamplingParams(max_tokens=1), 0.0)
        b = core.schedule(0.0)
        assert b is not None
        core.apply(b, ex.execute(b), 1.0)
        assert core.requests["a"].prompt_item is not None  # depth advanced
        assert core.requests["a"].prompt_item.depth == 1

    run_one(SeededExecutor())
