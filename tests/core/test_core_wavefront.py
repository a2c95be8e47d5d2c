"""The wavefront arm (A3) over random workloads and budgets (hypothesis): limits, the
(chunk, depth) ordering rule, state release on every path, and the wavefront itself."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core import Batch, EngineCore, SamplingParams, Stage
from engine.core.batch import ItemKind
from engine.core.seeded_executor import SeededExecutor
from tests.core.test_core_properties import run_arm, workloads
from tests.helpers import check_drained, make_config

Done = dict[tuple[str, int], set[tuple[int, int]]]  # (request, generation) -> {(start, depth)}


def check_order(batch: Batch, done: Done, chunk_starts: dict[tuple[str, int], list[int]],
                num_depths: int) -> None:
    """Every prompt item's predecessors ran in earlier steps: its own chunk at depth d-1,
    and the chunk before it at depth d."""
    for it in batch.items:
        if it.kind is not ItemKind.PROMPT:
            continue
        ran = done.setdefault(it.key, set())
        starts = chunk_starts.setdefault(it.key, [])
        if it.depth == 0 and it.position not in starts:
            starts.append(it.position)
        k = starts.index(it.position)
        assert it.num_depths == 1
        assert (it.position, it.depth) not in ran, "a (chunk, depth) item ran twice"
        if it.depth > 0:
            assert (it.position, it.depth - 1) in ran, f"{it.key} chunk {k} ran depth " \
                f"{it.depth} before its depth {it.depth - 1}"
        if k > 0:
            assert (starts[k - 1], it.depth) in ran, f"{it.key} chunk {k} ran depth " \
                f"{it.depth} before chunk {k - 1} wrote it"
    for it in batch.items:
        if it.kind is ItemKind.PROMPT:
            done[it.key].add((it.position, it.depth))
            assert it.depth < num_depths


def run_wavefront(w: dict, abort_at: int | None = None, fail_at: int | None = None,
                  ) -> tuple[dict[str, tuple], int, dict[str, str]]:
    """Drive the wavefront arm over ``w``; the outputs of the requests that ran to length,
    the most prompt items one request held in a step, and every finish reason.
    ``abort_at``/``fail_at``: abort the first request holding several chunks, or fail a
    batch holding several chunks, at or after that step."""
    cfg = make_config(
        "wavefront", max_num_seqs=w["max_num_seqs"], max_num_batched_tokens=w["budget"],
        prefill_chunk_size=w["chunk"], num_blocks=w["num_blocks"], block_size=w["block_size"],
        exit=w["exit"], incremental=w["incremental"], policy=w["policy"],
        min_coda_batch_size=w["min_coda"],
    )
    sched = cfg.scheduler
    core = EngineCore(cfg)
    ex = SeededExecutor(seed=7)
    pending = sorted(w["requests"], key=lambda r: r["arrival_step"])
    step, most = 0, 0
    done: Done = {}
    starts: dict[tuple[str, int], list[int]] = {}
    seen_handles: set[int] = set()
    limit = 40 + sum((len(r["prompt"]) + 4) * 4 + r["max_tokens"] * 8 for r in pending) * 2
    while pending or core.has_work():
        while pending and pending[0]["arrival_step"] <= step:
            r = pending.pop(0)
            core.add_request(r["id"], r["prompt"], SamplingParams(
                max_tokens=r["max_tokens"], exit_trace=r["trace"]), float(step), r["priority"])
        if abort_at is not None and step >= abort_at:
            for req in list(core.requests.values()):
                if len(req.prompt_chunks) > 1:
                    core.abort(req.request_id)
                    assert not req.prompt_chunks
                    abort_at = None
                    break
        batch = core.schedule(float(step))
        step += 1
        assert step < limit, "did not drain"
        if batch is None:
            assert pending or not core.has_work(), "core has work but scheduled nothing"
            continue
        assert len({it.request_id for it in batch.items}) <= sched.max_num_seqs
        assert batch.num_rows <= sched.max_num_batched_tokens
        if batch.stage is Stage.RECURRENT:
            kinds = [it.kind.value for it in batch.items]
            assert kinds == sorted(kinds)  # DECODE rows first, then PROMPT
        assert core.prompt_states.num_in_use <= cfg.max_prompt_states
        for req in core.requests.values():
            depths = [p.depth for p in req.prompt_chunks]
            assert len(depths) <= sched.max_chunks_in_flight(cfg.num_depths)
            assert depths == sorted(set(depths), reverse=True)  # distinct, chunk order
        per_request: dict[str, int] = {}
        for it in batch.items:
            if it.kind is ItemKind.PROMPT:
                per_request[it.request_id] = per_request.get(it.request_id, 0) + 1
        most = max([most, *per_request.values()])
        check_order(batch, done, starts, cfg.num_depths)
        seen_handles.update(it.prompt_state.handle_id for it in batch.items if it.prompt_state)
        if fail_at is not None and step > fail_at and max(per_request.values(), default=0) > 1:
            ex.execute(batch)
            core.fail(batch, "injected")
            fail_at = None
        else:
            core.apply(batch, ex.execute(batch), float(step))
        core.block_manager.check_integrity()
    check_drained(core, ex, seen_handles)
    out, reasons = {}, {}
    for r in core.pop_finished():
        assert not r.prompt_chunks
        reasons[r.request_id] = r.finish_reason
        if r.finish_reason == "length":
            out[r.request_id] = (tuple(r.output_token_ids), tuple(r.exit_depths))
    return out, most, reasons


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_wavefront_keeps_limits_order_and_agrees_with_mixed(w: dict) -> None:
    out, _, _ = run_wavefront(w)
    assert out == run_arm(w, "mixed")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.integers(0, 30), st.booleans())
def test_abort_and_failure_release_every_chunk(w: dict, at: int, fail: bool) -> None:
    run_wavefront(w, fail_at=at) if fail else run_wavefront(w, abort_at=at)


def lone_prompt(incremental: bool) -> dict:
    return {"max_num_seqs": 2, "chunk": 4, "budget": 17, "block_size": 4, "num_blocks": 64,
            "incremental": incremental, "policy": "fcfs", "min_coda": 1,
            "exit": make_config().exit,
            "requests": [{"id": "a", "prompt": list(range(24)), "max_tokens": 2,
                          "arrival_step": 0, "trace": None, "priority": 0},
                         {"id": "b", "prompt": list(range(3)), "max_tokens": 9,
                          "arrival_step": 0, "trace": None, "priority": 0}]}


@pytest.mark.parametrize("incremental", [False, True])
def test_the_wavefront_forms(incremental: bool) -> None:
    """A prompt of 6 chunks with room for 4 per step: chunk k starts one step after chunk
    k-1, so 4 chunks run at once at depths 3, 2, 1, 0."""
    w = lone_prompt(incremental)
    out, most, _ = run_wavefront(w)
    assert most == 4
    assert out == run_arm(w, "mixed")


@pytest.mark.parametrize("how", ["abort", "fail"])
def test_abort_and_failure_mid_wavefront(how: str) -> None:
    w = lone_prompt(True)
    _, _, reasons = run_wavefront(w, **{f"{how}_at": 2})
    assert reasons["a"] == ("abort" if how == "abort" else "error")
