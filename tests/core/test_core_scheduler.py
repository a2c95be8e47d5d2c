"""RFC §6 at the scheduler level: selection order, admission, budgets, readiness, fairness."""

from __future__ import annotations

import bisect

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.core import Batch, EngineCore, ItemKind, RequestStatus, SamplingParams, Stage
from engine.core.block_manager import BlockManager
from engine.core.policies import make_policy
from engine.core.prompt_state import PromptStateHandles
from engine.core.request import Request
from engine.core.results import step_kind
from engine.core.scheduler import Scheduler
from engine.core.seeded_executor import SeededExecutor
from tests.helpers import drive, make_config


def step(core: EngineCore, ex: SeededExecutor, now: float) -> Batch:
    batch = core.schedule(now)
    assert batch is not None
    core.apply(batch, ex.execute(batch), now + 1)
    return batch


def until_decoding(core: EngineCore, ex: SeededExecutor, ids: list[str]) -> float:
    now = 0.0
    while not all(core.requests[i].stage is Stage.RECURRENT for i in ids):
        step(core, ex, now)
        now += 1
    return now


def test_mixed_takes_decode_first_then_prompt_rows() -> None:
    core = EngineCore(make_config("mixed", max_num_seqs=4, max_num_batched_tokens=11,
                                  prefill_chunk_size=8))
    ex = SeededExecutor()
    for i in range(3):
        core.add_request(f"d{i}", [1, 2], SamplingParams(max_tokens=50), 0.0)
    now = until_decoding(core, ex, ["d0", "d1", "d2"])
    core.add_request("p", list(range(20)), SamplingParams(max_tokens=2), now)
    mixed = [b for b in (step(core, ex, now + k) for k in range(12)) if b.is_mixed]
    assert mixed, "no mixed core call formed"
    for b in mixed:
        kinds = [it.kind for it in b.items]
        assert kinds == [ItemKind.DECODE] * 3 + [ItemKind.PROMPT]
        assert b.num_rows == 11  # 3 decode rows + one whole 8-token chunk fills the budget


def test_selector_budget_boundary() -> None:
    core = EngineCore(make_config("per_depth", max_num_batched_tokens=16, prefill_chunk_size=8))
    core.add_request("a", list(range(8)), SamplingParams(max_tokens=1), 0.0)
    core.add_request("b", list(range(8)), SamplingParams(max_tokens=1), 0.0)
    core.scheduler.admit()
    s = core.scheduler
    assert [it.request_id for it in s.take_prompts(15)] == ["a"]  # b (8) no longer fits 7
    s.enqueue_prefill(core.requests["a"])
    assert [it.request_id for it in s.take_prompts(16)] == ["a", "b"]  # exactly fills
    for r in ("a", "b"):
        s.enqueue_prefill(core.requests[r])
    assert s.take_prompts(7) == []  # head does not fit: stop, never skip to a later one


def test_prompt_item_keeps_its_place_across_depths() -> None:
    # budget fits one prompt item: the oldest prompt must run all its depths and chunks first
    core = EngineCore(make_config("mixed", max_num_seqs=2, max_num_batched_tokens=9,
                                  prefill_chunk_size=8))
    ex = SeededExecutor()
    core.add_request("old", list(range(16)), SamplingParams(max_tokens=1), 0.0)
    core.add_request("young", list(range(8)), SamplingParams(max_tokens=1), 0.0)
    d = drive(core, ex)
    order = [(it.request_id, it.position, it.depth) for b in d.batches for it in b.items
             if it.kind is ItemKind.PROMPT]
    assert order[:8] == [("old", p, dep) for p in (0, 8) for dep in range(4)]
    assert order[8:] == [("young", 0, dep) for dep in range(4)]


@pytest.mark.parametrize("arm", ["atomic", "per_depth", "mixed", "wavefront"])
def test_admission_continues_while_a_long_prompt_runs(arm: str) -> None:
    core = EngineCore(make_config(arm, max_num_seqs=4, max_num_batched_tokens=11,
                                  prefill_chunk_size=8))
    ex = SeededExecutor()
    core.add_request("long", list(range(64)), SamplingParams(max_tokens=1), 0.0)
    for k in range(3):
        step(core, ex, float(k))
    core.add_request("short", [1, 2, 3], SamplingParams(max_tokens=3), 3.0)
    step(core, ex, 3.0)
    assert core.requests["short"].status is RequestStatus.RUNNING
    long = core.requests["long"]
    assert long.status is RequestStatus.RUNNING and long.stage is Stage.PREFILL  # unfinished
    d = drive(core, ex)
    finish = {e.request_id: e.time_s for e in d.events if e.finished}
    if arm != "atomic":  # per-depth prompt work lets the short request overtake
        assert finish["short"] < finish["long"]


def test_atomic_prefill_runs_all_depths_in_one_step_and_alternates_with_decode() -> None:
    core = EngineCore(make_config("atomic", max_num_seqs=4, max_num_batched_tokens=8,
                                  prefill_chunk_size=8))
    ex = SeededExecutor()
    core.add_request("d", [1], SamplingParams(max_tokens=40), 0.0)
    now = until_decoding(core, ex, ["d"])
    core.add_request("p", list(range(32)), SamplingParams(max_tokens=1), now)
    stages = [step(core, ex, now + k) for k in range(10)]
    prefill = [b for b in stages if b.stage is Stage.PREFILL]
    assert prefill and all(b.num_core_calls == 4 for b in prefill)
    labels = [step_kind(b) for b in stages if b.stage in (Stage.PREFILL, Stage.RECURRENT)]
    for a, b in zip(labels, labels[1:], strict=False):
        assert not (a == b == "prefill"), labels  # never two prefill batches back to back


def test_large_min_coda_batch_flushes_when_recurrent_is_empty() -> None:
    for arm in ("atomic", "per_depth", "mixed", "wavefront"):
        core = EngineCore(make_config(arm, min_coda_batch_size=100))
        ex = SeededExecutor()
        for i in range(3):
            core.add_request(f"r{i}", list(range(5 + i)), SamplingParams(max_tokens=4), 0.0)
        d = drive(core, ex, max_steps=500)
        assert len([e for e in d.events if e.finished]) == 3
        codas = [b for b in d.batches if b.stage is Stage.CODA]
        assert all(len(b.items) < 100 for b in codas)


def test_coda_waits_for_a_fuller_batch_while_recurrent_work_remains() -> None:
    core = EngineCore(make_config("atomic", min_coda_batch_size=2))
    core.add_request("a", [1], SamplingParams(max_tokens=1), 0.0)
    core.add_request("b", list(range(30)), SamplingParams(max_tokens=1), 0.0)
    core.scheduler.admit()
    s = core.scheduler
    s.coda.append(core.requests["a"])
    s.recurrent.append(core.requests["b"])
    assert not s.coda_ready()
    s.recurrent.clear()
    assert s.coda_ready()


@pytest.mark.parametrize("arm", ["atomic", "per_depth", "mixed", "wavefront"])
def test_repeated_short_arrivals_cannot_starve_a_running_decode(arm: str) -> None:
    core = EngineCore(make_config(arm, max_num_seqs=4, max_num_batched_tokens=11,
                                  prefill_chunk_size=8))
    ex = SeededExecutor()
    core.add_request("long", [1, 2], SamplingParams(max_tokens=200), 0.0)
    now = until_decoding(core, ex, ["long"])
    start_tokens = core.requests["long"].num_output_tokens
    decode_calls = prompt_calls = 0
    for k in range(60):
        if k % 2 == 0:
            core.add_request(f"s{k}", list(range(8)), SamplingParams(max_tokens=1), now)
        b = step(core, ex, now)
        now += 1
        has_long = any(it.request_id == "long" and it.kind is ItemKind.DECODE
                       and b.stage is Stage.RECURRENT for it in b.items)
        decode_calls += has_long
        prompt_calls += step_kind(b) in ("prefill", "prompt")
        if arm == "mixed" and b.stage is Stage.RECURRENT:
            assert has_long or core.requests["long"].stage is not Stage.RECURRENT
    # 30 one-chunk arrivals: prompt-only batches alternate with decode, never starve it
    assert decode_calls >= prompt_calls - 1 and decode_calls >= 15
    assert core.requests["long"].num_output_tokens - start_tokens >= 4


def test_priority_admission_and_bypass_limit() -> None:
    # pool of 24 blocks (block 1 token, 4 planes): a running request holds 8, a long one needs
    # 20 and waits; short ones (4 blocks) may bypass it once, then it is protected.
    core = EngineCore(make_config("atomic", num_blocks=24, block_size=1, max_num_seqs=4,
                                  max_admission_bypasses=1))
    core.add_request("run", [1], SamplingParams(max_tokens=2), 0.0)
    core.scheduler.admit()
    assert core.block_manager.num_used_blocks == 8
    core.add_request("long", list(range(4)), SamplingParams(max_tokens=2), 1.0)
    core.add_request("s1", [1], SamplingParams(max_tokens=1), 1.0)
    core.add_request("s2", [1], SamplingParams(max_tokens=1), 1.0)
    core.scheduler.admit()
    assert core.requests["s1"].status is RequestStatus.RUNNING  # bypassed once
    assert core.requests["s2"].status is RequestStatus.WAITING  # long is now protected
    assert core.requests["long"].bypassed == 1
    core2 = EngineCore(make_config("atomic", policy="priority"))
    core2.add_request("low", [1], SamplingParams(max_tokens=1), 0.0, priority=5)
    core2.add_request("high", [1], SamplingParams(max_tokens=1), 0.0, priority=0)
    assert core2.scheduler.waiting.admit(1, lambda r: True)[0].request_id == "high"


def test_request_that_can_never_fit_is_rejected() -> None:
    core = EngineCore(make_config("atomic", num_blocks=8, block_size=1))
    with pytest.raises(ValueError, match="cache.num_blocks"):
        core.add_request("big", list(range(10)), SamplingParams(max_tokens=1), 0.0)
    assert not core.has_work()


@pytest.mark.parametrize("arm", ["atomic", "per_depth"])
def test_failed_batches_do_not_move_the_decode_alternation(arm: str) -> None:
    core = EngineCore(make_config(arm, max_num_seqs=4, max_num_batched_tokens=8,
                                  prefill_chunk_size=8))
    ex = SeededExecutor()
    core.add_request("d", [1], SamplingParams(max_tokens=40), 0.0)
    now = until_decoding(core, ex, ["d"])
    core.add_request("p1", list(range(32)), SamplingParams(max_tokens=1), now)
    b = core.schedule(now)
    assert b is not None and step_kind(b) == "decode"  # the decoder is due first
    core.apply(b, ex.execute(b), now + 1)
    b = core.schedule(now + 1)
    assert b is not None and step_kind(b) in ("prefill", "prompt")
    core.fail(b)  # p1 fails: decode's turn is not used up by a batch that did nothing
    core.add_request("p2", list(range(32)), SamplingParams(max_tokens=1), now + 2)
    b = core.schedule(now + 2)
    assert b is not None and step_kind(b) in ("prefill", "prompt")
    core.apply(b, ex.execute(b), now + 3)
    b = core.schedule(now + 3)
    assert b is not None and step_kind(b) == "decode"
    core.fail(b)  # the decoder fails; its turn stays due for the next decoder
    core.add_request("d2", [1], SamplingParams(max_tokens=3), now + 4)
    assert core.scheduler.decode_due() is False  # no decoder queued yet
    assert core.scheduler.prefill_batches_since_decode == 1


def test_the_scheduler_admits_selects_and_requeues_without_a_core() -> None:
    cfg = make_config("per_depth")
    s = Scheduler(cfg, BlockManager(cfg.cache, 4), PromptStateHandles(4), make_policy("per_depth"))
    req = Request("a", (1, 2, 3), SamplingParams(max_tokens=1), 0.0, 0, generation=0,
                  exit=cfg.exit, arrival_seq=0)
    s.add(req)
    sel = s.schedule(2.5)
    assert sel is not None and sel[0] is Stage.RECURRENT
    assert [it.request_id for it in sel[1]] == ["a"]
    assert req.status is RequestStatus.RUNNING and req.stage is Stage.PREFILL
    assert req.admitted_s == 2.5 and s.running == {"a": req}
    assert s.prefill == [] and s.prefill_batches_since_decode == 1  # in flight
    s.undo_fairness()
    assert s.prefill_batches_since_decode == 0
    s.requeue(req)
    assert s.prefill == [req]
    s.remove(req)
    assert s.prefill == [] and s.running == {} and len(s.waiting) == 0


@pytest.mark.parametrize("arm", ["per_depth", "mixed"])
def test_coda_flushes_while_a_prompt_is_mid_depth(arm: str) -> None:
    """RFC §1: prompt items stay in the PREFILL queue, so they never hold a small CODA batch
    back: with min_coda_batch_size 4 and no decode in the loop, a lone CODA request goes out
    while a prompt chunk is between depths."""
    core = EngineCore(make_config(arm, min_coda_batch_size=4, max_num_batched_tokens=16,
                                  prefill_chunk_size=8))
    ex = SeededExecutor()
    core.add_request("d", [1, 2], SamplingParams(max_tokens=3), 0.0)
    now = until_decoding(core, ex, ["d"])
    step(core, ex, now)  # d one depth ahead, so it leaves the loop while p is mid-depth
    now += 1
    core.add_request("p", list(range(24)), SamplingParams(max_tokens=1), now)
    s = core.scheduler
    flushed = 0
    for k in range(200):
        req = core.requests.get("p")
        prompt = req.prompt_item if req is not None else None
        mid_depth = prompt is not None and 0 < prompt.depth < core.cfg.num_depths
        waiting = bool(s.coda) and not s.recurrent and mid_depth
        batch = core.schedule(now + k)
        if batch is None:
            break
        core.apply(batch, ex.execute(batch), now + k + 1)
        if waiting:
            assert batch.stage is Stage.CODA, (k, batch.stage)
            assert [it.request_id for it in batch.items] == ["d"]
            flushed += 1
    assert flushed >= 1, "the test never reached a CODA beside a mid-depth prompt"


@pytest.mark.parametrize("delta", [-1, 1])
def test_a_wrong_length_signal_tuple_is_an_interface_error(delta: int) -> None:
    """RFC §1: one signal per DECODE item, in item order; a tuple one short or one long
    (prompt rows counted, a row dropped) is rejected before anything is applied."""
    from engine.core import ExitConfig
    from engine.core.errors import StaleResultError
    from engine.core.results import RecurrentResult

    core = EngineCore(make_config("mixed", max_num_seqs=4, max_num_batched_tokens=11,
                                  prefill_chunk_size=8,
                                  exit=ExitConfig(mode="ouro", exit_threshold=0.5)))
    ex = SeededExecutor()
    for i in range(2):
        core.add_request(f"d{i}", [1, 2], SamplingParams(max_tokens=50), 0.0)
    now = until_decoding(core, ex, ["d0", "d1"])
    core.add_request("p", list(range(20)), SamplingParams(max_tokens=2), now)
    batch = core.schedule(now)
    assert batch is not None and batch.is_mixed and batch.needs_signals
    good = ex.execute(batch)
    assert isinstance(good, RecurrentResult) and good.decode_signals is not None
    assert len(good.decode_signals) == batch.num_decode_items == 2
    signals = (good.decode_signals + (0.5,))[:batch.num_decode_items + delta]
    done = {r: core.requests[r].num_depths_done for r in ("d0", "d1")}
    with pytest.raises(StaleResultError, match="does not fit"):
        core.apply(batch, RecurrentResult(batch.step, signals), now + 1)
    assert {r: core.requests[r].num_depths_done for r in ("d0", "d1")} == done  # nothing applied
    core.apply(batch, good, now + 1)
    assert all(core.requests[r].num_depths_done == done[r] + 1 for r in ("d0", "d1"))


@given(st.lists(st.integers(0, 12), max_size=30))
def test_enqueue_prefill_orders_as_bisect_insort(seqs: list[int]) -> None:
    """The prefill queue's tail-first insertion equals ``bisect.insort`` by admission order
    (after equal keys), whatever order requests come back in."""
    cfg = make_config("mixed")
    s = Scheduler(cfg, BlockManager(cfg.cache, 4), PromptStateHandles(4), make_policy("mixed"))
    reference: list[Request] = []
    for i, seq in enumerate(seqs):
        req = Request(f"r{i}", (1,), SamplingParams(max_tokens=1), 0.0, admitted_seq=seq)
        s.enqueue_prefill(req)
        bisect.insort(reference, req, key=lambda r: r.admitted_seq)
        assert s.prefill == reference
