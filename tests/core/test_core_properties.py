"""Property tests over random workloads, for every arm (hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core import Batch, EngineCore, ExitConfig, SamplingParams, Stage
from engine.core.seeded_executor import SeededExecutor
from tests.helpers import check_drained, make_config

ARMS = ("atomic", "per_depth", "mixed")


@st.composite
def workloads(draw: st.DrawFn) -> dict:
    max_num_seqs = draw(st.integers(1, 4))
    chunk = draw(st.integers(1, 12))
    budget = chunk + max_num_seqs - 1 + draw(st.integers(0, 6))
    block_size = draw(st.sampled_from([1, 2, 4, 8]))
    mode = draw(st.sampled_from(["fixed", "ouro", "ouro_delayed", "random_lookahead",
                                 "categorical", "trace"]))
    exit_cfg = {
        "fixed": ExitConfig(),
        "ouro": ExitConfig(mode="ouro", exit_threshold=0.6),
        "ouro_delayed": ExitConfig(mode="ouro_delayed", exit_threshold=0.5),
        "random_lookahead": ExitConfig(mode="random_lookahead", exit_threshold=0.5),
        "categorical": ExitConfig(mode="categorical", probs=(0.3, 0.3, 0.2, 0.2)),
        "trace": ExitConfig(mode="trace"),
    }[mode]
    reqs = []
    for i in range(draw(st.integers(1, 7))):
        max_tokens = draw(st.integers(1, 6))
        trace = None
        if mode == "trace":
            trace = (4, *draw(st.lists(st.integers(1, 4), min_size=max_tokens - 1,
                                       max_size=max_tokens - 1)))
        reqs.append({
            "id": f"r{i}",
            "prompt": list(range(draw(st.integers(1, 30)))),
            "max_tokens": max_tokens,
            "arrival_step": draw(st.integers(0, 25)),
            "trace": trace,
            "priority": draw(st.integers(0, 2)),
        })
    largest = max(len(r["prompt"]) + r["max_tokens"] for r in reqs)
    min_blocks = -(-largest // block_size) * 4
    return {
        "max_num_seqs": max_num_seqs,
        "chunk": chunk,
        "budget": budget,
        "block_size": block_size,
        "num_blocks": min_blocks + draw(st.integers(0, 3 * min_blocks)),
        "incremental": draw(st.booleans()),
        "policy": draw(st.sampled_from(["fcfs", "priority"])),
        "min_coda": draw(st.integers(1, 5)),
        "exit": exit_cfg,
        "requests": reqs,
    }


def run_arm(w: dict, arm: str) -> dict[str, tuple]:
    cfg = make_config(
        arm, max_num_seqs=w["max_num_seqs"], max_num_batched_tokens=w["budget"],
        prefill_chunk_size=w["chunk"], num_blocks=w["num_blocks"], block_size=w["block_size"],
        exit=w["exit"], incremental=w["incremental"], policy=w["policy"],
        min_coda_batch_size=w["min_coda"],
    )
    core = EngineCore(cfg)
    ex = SeededExecutor(seed=7)
    pending = sorted(w["requests"], key=lambda r: r["arrival_step"])
    step = 0
    limit = 40 + sum((len(r["prompt"]) + 4) * 4 + r["max_tokens"] * 8 for r in pending) * 2
    seen_handles: set[int] = set()
    while pending or core.has_work():
        while pending and pending[0]["arrival_step"] <= step:
            r = pending.pop(0)
            core.add_request(r["id"], r["prompt"], SamplingParams(
                max_tokens=r["max_tokens"], exit_trace=r["trace"]), float(step), r["priority"])
        batch = core.schedule(float(step))
        step += 1
        assert step < limit, "did not drain"
        if batch is None:
            assert pending, "core has work but scheduled nothing"
            continue
        check_batch(batch, cfg.scheduler.max_num_seqs, cfg.scheduler.max_num_batched_tokens)
        assert core.num_running <= cfg.scheduler.max_num_seqs
        assert core.prompt_states.num_in_use <= cfg.scheduler.max_num_seqs
        seen_handles.update(it.prompt_state.handle_id for it in batch.items if it.prompt_state)
        core.apply(batch, ex.execute(batch), float(step))
        core.block_manager.check_integrity()
    check_drained(core, ex, seen_handles)
    out = {}
    for r in core.pop_finished():
        assert r.finish_reason == "length"
        assert len(r.output_token_ids) == r.params.max_tokens
        out[r.request_id] = (tuple(r.output_token_ids), tuple(r.exit_depths))
    assert len(out) == len(w["requests"])
    return out


def check_batch(batch: Batch, max_num_seqs: int, budget: int) -> None:
    assert len(batch.items) <= max_num_seqs
    assert len({it.request_id for it in batch.items}) == len(batch.items)
    if batch.stage in (Stage.RECURRENT, Stage.PREFILL):
        assert batch.num_rows <= budget
    if batch.stage is Stage.RECURRENT:
        kinds = [it.kind.value for it in batch.items]
        assert kinds == sorted(kinds)  # DECODE rows first, then PROMPT


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_every_arm_respects_limits_drains_and_agrees(w: dict) -> None:
    results = {arm: run_arm(w, arm) for arm in ARMS}
    assert results["atomic"] == results["per_depth"] == results["mixed"]
    if w["exit"].mode == "trace":
        for r in w["requests"]:
            depths = results["mixed"][r["id"]][1]
            assert depths == r["trace"][: r["max_tokens"]]
