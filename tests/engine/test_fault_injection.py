"""Fault injection: executors that raise before or after applying housekeeping,
aborts at random points (between schedule and execute too, and mid-prompt at every depth),
request-id reuse; on every arm, with the fake executor and the CPU runner on the tiny model.
After every case every pool is whole, only a failed batch's requests ended with ``error``,
and a fresh request then succeeds. 332 cases: 60 per arm on the fake executor, 40 per arm on
the runner, and 32 mid-prompt aborts (4 depths x 2 arms x 2 worlds x 2 moments)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core import EngineCore, SamplingParams
from engine.llm import LLM
from tests.fault_world import (
    World,
    assert_only_failed_errored,
    assert_whole,
    fake_world,
    run_with_faults,
    runner_world,
)
from tests.helpers import make_config
from tests.reference.fixtures import ARMS, ENGINE_KWARGS, tiny_model

ACTIONS = ("raise_before", "raise_after", "abort_scheduled", "abort", "reuse")

requests_st = st.lists(
    st.tuples(st.integers(1, 30), st.integers(1, 4)), min_size=1, max_size=5
)
faults_st = st.dictionaries(
    st.integers(0, 30), st.tuples(st.sampled_from(ACTIONS), st.integers(0, 99)),
    min_size=1, max_size=10
)


def _add(core: EngineCore, reqs: list[tuple[int, int]]) -> None:
    for i, (n, max_tokens) in enumerate(reqs):
        prompt = [(7 * i + 3 * j) % 60 + 1 for j in range(n)]
        core.add_request(f"r{i}", prompt, SamplingParams(max_tokens=max_tokens,
                                                         ignore_eos=True), 0.0)


def _check_case(world: World, reqs: list[tuple[int, int]],
                faults: dict[int, tuple[str, int]]) -> None:
    _add(world.core, reqs)
    out = run_with_faults(world, faults)
    assert_only_failed_errored(out)
    assert_whole(world)
    world.core.add_request("fresh", [5, 4, 3, 2, 1, 9, 8], SamplingParams(max_tokens=3,
                                                                      ignore_eos=True), 0.0)
    fresh = run_with_faults(world, {}).finished
    assert [(r.request_id, r.finish_reason, len(r.output_token_ids)) for r in fresh] == [
        ("fresh", "length", 3)]
    assert_whole(world)


_SETTINGS = dict(deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("arm", ARMS)
@settings(max_examples=60, **_SETTINGS)  # type: ignore[arg-type]
@given(reqs=requests_st, faults=faults_st)
def test_fake_executor_survives_faults(arm: str, reqs: list[tuple[int, int]],
                                       faults: dict[int, tuple[str, int]]) -> None:
    core = EngineCore(make_config(arm, max_num_seqs=4, max_num_batched_tokens=16,
                                  prefill_chunk_size=8))
    _check_case(fake_world(core), reqs, faults)


_MODEL = tiny_model()


@pytest.mark.parametrize("arm", ARMS)
@settings(max_examples=40, **_SETTINGS)  # type: ignore[arg-type]
@given(reqs=requests_st, faults=faults_st)
def test_cpu_runner_survives_faults(arm: str, reqs: list[tuple[int, int]],
                                    faults: dict[int, tuple[str, int]]) -> None:
    llm = LLM(_MODEL, arm=arm, **ENGINE_KWARGS)  # type: ignore[arg-type]
    _check_case(runner_world(llm), reqs, faults)


@pytest.mark.parametrize("world_kind", ["fake", "runner"])
@pytest.mark.parametrize("arm", ["per_depth", "mixed"])
@pytest.mark.parametrize("when", ["scheduled", "between_steps"])
def test_abort_mid_prompt_at_every_depth(world_kind: str, arm: str, when: str) -> None:
    """The prompt request is aborted while its item sits at depth d, for every d."""
    for depth in range(_MODEL.config.to_shape().num_depths):
        if world_kind == "fake":
            world = fake_world(EngineCore(make_config(arm, max_num_seqs=4,
                                                      max_num_batched_tokens=16,
                                                      prefill_chunk_size=8)))
        else:
            world = runner_world(LLM(_MODEL, arm=arm, **ENGINE_KWARGS))  # type: ignore[arg-type]
        core = world.core
        _add(core, [(3, 4), (20, 2), (5, 3)])
        victim = core.requests["r1"]
        hit = _abort_at_depth(world, victim.request_id, depth, when)
        assert hit, f"r1 never sat at depth {depth}"
        out = run_with_faults(world, {})
        out.aborted.add((victim.request_id, victim.generation))
        assert_only_failed_errored(out)
        assert_whole(world)


def _abort_at_depth(world: World, rid: str, depth: int, when: str) -> bool:
    """Step until ``rid``'s prompt item is at ``depth`` (after its first chunk when depth is
    0), then abort it: between two steps, or after the step that runs it was scheduled."""
    core, now = world.core, 0.0
    for _ in range(300):
        p = core.requests[rid].prompt_item
        at_depth = p is not None and p.depth == depth and (depth > 0 or p.token_start > 0)
        if when == "between_steps" and at_depth:
            return core.abort(rid)
        batch = core.schedule(now)
        assert batch is not None
        aborted = when == "scheduled" and at_depth and any(
            it.request_id == rid for it in batch.items)
        if aborted:
            assert core.abort(rid)
        core.apply(batch, world.execute(batch, False), now + 1)
        now += 1
        if aborted:
            return True
    return False
