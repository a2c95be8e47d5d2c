"""A simulation without step rows (``record_steps=False``, what a capacity probe runs): the
same tokens and requests, the same core-call counts, no step rows."""

from __future__ import annotations

import pytest

from engine.core import CacheConfig, EngineConfig, SamplingParams, SchedulerConfig
from engine.core.records import ArrivalSpec
from engine.core.shapes import TINY
from sim import make_cost_model, simulate
from tests.helpers import ListSource


def _source() -> ListSource:
    return ListSource([ArrivalSpec(f"r{i}", tuple(range(3 + 9 * (i % 7))),
                                   SamplingParams(max_tokens=4 + i % 9), 0.0005 * i)
                       for i in range(40)])


@pytest.mark.parametrize("arm", ["atomic", "per_depth", "mixed"])
def test_a_run_without_step_rows_counts_what_the_rows_hold(arm: str) -> None:
    cfg = EngineConfig(TINY, SchedulerConfig(arm=arm, max_num_seqs=4, max_num_batched_tokens=24,
                                             prefill_chunk_size=8), CacheConfig(num_blocks=4096))
    cost = make_cost_model("roofline", TINY, hardware="h200")
    full = simulate(cfg, _source(), cost, seed=2)
    bare = simulate(cfg, _source(), cost, seed=2, record_steps=False)
    assert len(full.steps) > 0 and len(bare.steps) == 0
    assert list(bare.tokens) == list(full.tokens)
    assert bare.requests == full.requests
    assert bare.num_core_calls == full.num_core_calls > 0
    assert bare.num_mixed_core_calls == full.num_mixed_core_calls
    assert (full.num_mixed_core_calls > 0) == (arm == "mixed")
