"""The memory estimate checked before any work: it covers what a run
really holds, reads the machine's available memory, and obeys LOOPSERVE_MEMORY_LIMIT."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from loopserve.errors import UserError
from loopserve.plan import footprint, plan_runs
from loopserve.runs.loop import execute
from loopserve.schema import load_scenario
from loopserve.schema.load import validate
from tests.scenario_fixtures import tiny

DECODE_HEAVY = ["repeats=1", "sweep=null"]
PROMPT_HEAVY = [*DECODE_HEAVY, "scheduler.prefill_chunk_size=32",
                "workload={kind: poisson, num_requests: 100, request_rate: 1000, "
                "prompt_tokens: 2048, output_tokens: 2}"]


SINGLE_DECODER = [*DECODE_HEAVY, "workload.decode_population=1",
                  "workload.inject=[{at_decode_tokens: 64, prompt_tokens: 256}]"]


@pytest.mark.parametrize("sets", [DECODE_HEAVY, PROMPT_HEAVY, SINGLE_DECODER],
                         ids=["decode", "prompt", "single-decoder"])
def test_the_records_estimate_covers_what_the_runs_hold(sets: list[str]) -> None:
    scn = load_scenario("scenarios/interference.yaml", sets)
    plan = plan_runs(scn, "sim")
    size = footprint.workload_size(scn)
    estimate = len(plan.runs) * footprint.records_bytes(
        size, scn.scheduler.max_num_batched_tokens, plan.shape.num_depths)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        runs = execute(plan, progress=False)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert sum(len(r.records.tokens) for r in runs) <= size.output_tokens * len(runs)
    # covers the records, and is not wildly pessimistic
    assert held <= estimate <= 4 * held, (held, estimate)


def test_available_memory_is_the_machines_capped_by_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(footprint.LIMIT_ENV, raising=False)
    machine = footprint.available_bytes()
    assert 0 < machine
    monkeypatch.setenv(footprint.LIMIT_ENV, str(1 << 20))
    assert footprint.available_bytes() == 1 << 20
    monkeypatch.setenv(footprint.LIMIT_ENV, "lots")
    with pytest.raises(UserError, match="LOOPSERVE_MEMORY_LIMIT: 'lots' is not a number"):
        footprint.available_bytes()


def test_a_run_that_fits_under_the_limit_plans_and_one_past_it_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scn = validate(tiny(cache={"block_size": 4, "num_blocks": 1_000_000}))
    need = 1_000_000 * footprint.BLOCK_BOOKKEEPING_BYTES  # 64 MB, the records far less
    monkeypatch.setenv(footprint.LIMIT_ENV, str(need))
    plan_runs(scn, "sim")
    monkeypatch.setenv(footprint.LIMIT_ENV, str(need - 1))
    with pytest.raises(UserError, match="cache.num_blocks: 1000000 blocks of 4 tokens"):
        plan_runs(scn, "sim")


def test_device_bytes_counts_the_kv_tensors_of_the_model() -> None:
    from engine.core.shapes import MODEL_SHAPES

    plan = plan_runs(validate(tiny(model="ouro-1.4b", cache={"block_size": 16,
                                                            "num_blocks": 1000})), "sim")
    cfg = plan.runs[0].cfg
    m = MODEL_SHAPES["ouro-1.4b"]
    kv = 2 * m.num_layers * 1000 * 16 * m.num_kv_heads * m.head_dim * 2
    assert kv < footprint.device_bytes(cfg, 2) < kv + 2 * 1.6e9 * 2  # + weights (1.4B params)
