"""Prefix caching in the core, per arm: hits at admission, and properties over random
workloads with shared prefixes, aborts and request-id reuse (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core import Batch, EngineCore, ExitConfig, SamplingParams, Stage
from engine.core.seeded_executor import SeededExecutor
from tests.helpers import drive, make_config

ARMS = ("atomic", "per_depth", "mixed", "wavefront")


def prompt_rows(batch: Batch) -> list[tuple[int, int]]:
    return [(it.position, it.num_tokens) for it in batch.items if it.kind.value == "PROMPT"]


@pytest.mark.parametrize("arm", ARMS)
def test_a_later_request_starts_after_its_cached_prefix(arm: str) -> None:
    cfg = make_config(arm, max_num_batched_tokens=16, prefill_chunk_size=8, block_size=4,
                      prefix_caching=True)
    core = EngineCore(cfg)
    ex = SeededExecutor()
    system = list(range(1, 15))  # 14 tokens: 3 full blocks
    core.add_request("a", system + [20, 21], SamplingParams(max_tokens=2), 0.0)
    drive(core, ex)
    core.add_request("b", system + [30], SamplingParams(max_tokens=2), 0.0)
    b = core.requests["b"]
    out = drive(core, ex)
    assert b.num_cached_tokens == 12 and b.finish_reason == "length"
    rows = [r for batch in out.batches for r in prompt_rows(batch)]
    assert rows[0] == (12, 3)  # only positions 12..14 are computed
    pc = core.block_manager.prefix_cache
    assert pc is not None
    assert (pc.stats.queried_tokens, pc.stats.hit_tokens) == (16 + 15, 12)


@pytest.mark.parametrize("arm", ARMS)
def test_whole_prompt_hit_still_computes_the_last_block(arm: str) -> None:
    core = EngineCore(make_config(arm, block_size=4, prefix_caching=True))
    ex = SeededExecutor()
    prompt = list(range(1, 13))  # exactly 3 blocks
    core.add_request("a", prompt, SamplingParams(max_tokens=3), 0.0)
    first = core.requests["a"]
    drive(core, ex)
    core.add_request("a", prompt, SamplingParams(max_tokens=3), 0.0)  # id reuse
    again = core.requests["a"]
    out = drive(core, ex)
    assert again.num_cached_tokens == 8
    assert {r for b in out.batches for r in prompt_rows(b)} == {(8, 4)}
    assert again.output_token_ids == first.output_token_ids


@st.composite
def workloads(draw: st.DrawFn) -> dict:
    max_num_seqs = draw(st.integers(1, 4))
    chunk = draw(st.integers(1, 10))
    block_size = draw(st.sampled_from([1, 2, 4]))
    families = [draw(st.lists(st.integers(0, 63), min_size=3, max_size=20)) for _ in range(2)]
    reqs = []
    for i in range(draw(st.integers(1, 7))):
        family = families[draw(st.integers(0, 1))]
        keep = len(family) if draw(st.booleans()) else draw(st.integers(0, len(family)))
        suffix = draw(st.lists(st.integers(0, 63), max_size=6))
        prompt = family[:keep] + suffix or [1]
        reqs.append({
            "id": f"r{draw(st.integers(0, 3)) if draw(st.booleans()) else i + 10}",
            "prompt": prompt,
            "max_tokens": draw(st.integers(1, 5)),
            "arrival_step": draw(st.integers(0, 80)),
        })
    largest = max(len(r["prompt"]) + r["max_tokens"] for r in reqs)
    min_blocks = -(-largest // block_size) * 4
    return {
        "max_num_seqs": max_num_seqs,
        "chunk": chunk,
        "budget": chunk + max_num_seqs - 1 + draw(st.integers(0, 4)),
        "block_size": block_size,
        "num_blocks": min_blocks + draw(st.integers(0, 2 * min_blocks)),
        "incremental": draw(st.booleans()),
        "shortcut": draw(st.booleans()),  # mixed arm: a prompt's remaining depths at once
        "exit": draw(st.sampled_from([ExitConfig(), ExitConfig(mode="ouro", exit_threshold=0.6),
                                      ExitConfig(mode="categorical", probs=(.3, .3, .2, .2))])),
        "aborts": draw(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 13)), max_size=3)),
        "failures": draw(st.lists(st.integers(0, 60), max_size=2)),
        "requests": reqs,
    }


def check_no_shared_write(core: EngineCore, batch: Batch) -> None:
    """No row of the batch writes, and no finalize copy lands in, a shared block."""
    kv = core.block_manager
    bs = kv.block_size
    for it in batch.items:
        if batch.stage in (Stage.PRELUDE, Stage.CODA) or not kv.holds(it.key):
            continue
        for p in range(it.position, it.position + it.num_tokens):
            assert not kv.is_shared(it.key, p // bs), f"{it.key} writes shared position {p}"
    for op in batch.housekeeping.finalize:
        key = (op.request_id, op.generation)
        if kv.holds(key):
            assert not kv.is_shared(key, op.position // bs)


def run(w: dict, arm: str, caching: bool) -> dict[tuple[str, int], tuple]:
    cfg = make_config(
        arm, max_num_seqs=w["max_num_seqs"], max_num_batched_tokens=w["budget"],
        prefill_chunk_size=w["chunk"], num_blocks=w["num_blocks"], block_size=w["block_size"],
        exit=w["exit"], incremental=w["incremental"], prefix_caching=caching,
        prompt_shortcut=w["shortcut"] and arm == "mixed",
    )
    core = EngineCore(cfg)
    ex = SeededExecutor(seed=3)
    pending = sorted(enumerate(w["requests"]), key=lambda r: r[1]["arrival_step"])
    aborts = dict(w["aborts"])
    occurrence: dict[str, int] = {}
    step = 0
    limit = 60 + sum((len(r["prompt"]) + 4) * 4 + r["max_tokens"] * 8 for _, r in pending) * 2
    out = {}
    while pending or core.has_work():
        if (pending and pending[0][1]["arrival_step"] <= step
                and pending[0][1]["id"] not in core.requests):
            i, r = pending.pop(0)  # an id still active waits: reuse comes after it finished
            core.add_request(r["id"], r["prompt"], SamplingParams(max_tokens=r["max_tokens"]),
                             float(step))
        if step in aborts:
            core.abort(w["requests"][aborts[step] % len(w["requests"])]["id"])
        step += 1
        assert step < limit, "did not drain"
        batch = core.schedule(float(step))
        if batch is not None:
            if caching:
                check_no_shared_write(core, batch)
            if step in w["failures"]:
                core.fail(batch)  # the batch-failure path releases exactly its requests' refs
            else:
                core.apply(batch, ex.execute(batch), float(step))
        core.block_manager.check_integrity()
        for req in core.pop_finished():
            n = occurrence[req.request_id] = occurrence.get(req.request_id, -1) + 1
            assert req.num_cached_tokens <= req.num_prompt_tokens - 1
            if req.finish_reason == "length":
                out[(req.request_id, n)] = (tuple(req.output_token_ids), tuple(req.exit_depths))
    ex.execute(Batch(-1, Stage.PRELUDE, (), core.take_housekeeping()))
    kv = core.block_manager
    assert kv.num_used_blocks == 0 and kv.num_reserved_blocks == 0  # free or cached only
    if kv.prefix_cache is not None:
        assert all(e.ref_count == 0 for e in kv.prefix_cache.entries())
        assert kv.num_free_blocks == kv.num_blocks
    assert core.prompt_states.num_in_use == 0
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_caching_keeps_outputs_and_bookkeeping_per_arm(w: dict) -> None:
    for arm in ARMS:
        cached, plain = run(w, arm, True), run(w, arm, False)
        if not (w["aborts"] or w["failures"]):
            assert cached == plain
        else:  # an abort or failure lands elsewhere in progress: compare what both finished
            common = cached.keys() & plain.keys()
            assert {k: cached[k] for k in common} == {k: plain[k] for k in common}
