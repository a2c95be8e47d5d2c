"""Conformance: the SimPy driver and the real-time driver with the CPU runner form the same
batch sequence on closed workloads (trace exits, fixed output lengths)."""

from __future__ import annotations

import pytest

from engine.core import ExitConfig
from engine.llm import build_runner, make_engine_config
from engine.realtime import run_realtime
from loopserve.workloads import InterferenceWorkload, build_source
from sim.cost.constant import ConstantCost
from sim.driver import simulate
from tests.reference.fixtures import ARMS, ENGINE_KWARGS, tiny_model

WORKLOAD = InterferenceWorkload(
    kind="interference", decode_population=3, decode_prompt_tokens=10,
    decode_output_tokens=12,
    inject=[{"at_decode_tokens": 2, "prompt_tokens": 21, "output_tokens": 4},  # type: ignore[list-item]
            {"at_decode_tokens": 6, "prompt_tokens": 9, "output_tokens": 3}],
)
TRACE = (4, 2, 3, 1, 4, 1)


@pytest.mark.parametrize("arm", ARMS)
def test_sim_and_real_drivers_form_the_same_batches(arm: str) -> None:
    model = tiny_model()
    cfg = make_engine_config(model, arm=arm, exit=ExitConfig(mode="trace"), **ENGINE_KWARGS)

    def source():  # type: ignore[no-untyped-def]
        return build_source(WORKLOAD, seed=3, vocab_size=64, exit_trace=TRACE)

    sim = simulate(cfg, source(), ConstantCost(1e-3), record_batches=True, vocab_size=64)
    real = run_realtime(cfg, source(), build_runner(model, cfg), record_batches=True)
    assert len(real.batches) > 40
    assert real.batches == sim.batches
    assert [(s.stage, s.core_calls, s.depths, s.mixed) for s in real.steps] == [
        (s.stage, s.core_calls, s.depths, s.mixed) for s in sim.steps
    ]
    depths = {(t.request_id, t.index): t.exit_depth for t in real.tokens}
    assert depths == {(t.request_id, t.index): t.exit_depth for t in sim.tokens}
    assert sorted(r.request_id for r in real.requests) == sorted(
        r.request_id for r in sim.requests)
    # Same validity verdicts (inject-1 finds all 4 slots busy), up to the clock in the text.
    assert [r.split(" at t=")[0] for r in real.invalid_reasons] == [
        r.split(" at t=")[0] for r in sim.invalid_reasons
    ]
    if arm == "mixed":
        assert real.num_mixed_core_calls > 0


PREFIX_WORKLOAD = InterferenceWorkload(
    kind="interference", decode_population=2, decode_prompt_tokens=6,
    decode_output_tokens=14,
    inject=[{"at_decode_tokens": k, "prompt_tokens": 19, "output_tokens": 3}  # type: ignore[misc]
            for k in (1, 6, 10)],
    shared_prefix={"tokens": 13, "num_prefixes": 1},  # type: ignore[arg-type]
)


@pytest.mark.parametrize("arm", ARMS)
def test_sim_and_real_drivers_agree_with_prefix_caching(arm: str) -> None:
    model = tiny_model()
    cfg = make_engine_config(model, arm=arm, exit=ExitConfig(mode="trace"),
                             **{**ENGINE_KWARGS, "enable_prefix_caching": True})

    def source():  # type: ignore[no-untyped-def]
        return build_source(PREFIX_WORKLOAD, seed=3, vocab_size=64, exit_trace=TRACE)

    sim = simulate(cfg, source(), ConstantCost(1e-3), record_batches=True, vocab_size=64)
    real = run_realtime(cfg, source(), build_runner(model, cfg), record_batches=True)
    assert real.batches == sim.batches
    depths = {(t.request_id, t.index): t.exit_depth for t in real.tokens}
    assert depths == {(t.request_id, t.index): t.exit_depth for t in sim.tokens}
    # inject-1 and inject-2 start after the 12 cached positions of inject-0's prefix.
    starts = {}
    for _, items in sim.batches:
        for rid, kind, position, *_ in items:
            if kind == "PROMPT":
                starts.setdefault(rid, position)
    assert (starts["inject-0"], starts["inject-1"], starts["inject-2"]) == (0, 12, 12)
    assert real.prefix_cache == sim.prefix_cache
    assert sim.prefix_cache is not None and sim.prefix_cache.hit_tokens == 24
