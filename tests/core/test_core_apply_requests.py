"""``apply`` reads the latest scheduled batch's requests from the scheduler instead of looking
each item's request up by id; any other batch object takes the lookup, the reference. Both
give the same run, with requests aborted and ids reused while their batch is in flight."""

from __future__ import annotations

import pytest

from engine.core import Batch, EngineCore, ExitConfig, SamplingParams
from engine.core.records import batch_signature
from engine.core.seeded_executor import SeededExecutor
from tests.helpers import check_request_kv, make_config

ARMS = ("atomic", "per_depth", "mixed", "wavefront")
EXITS = (ExitConfig(), ExitConfig(mode="ouro", exit_threshold=0.4))


def _prompt(i: int) -> list[int]:
    return [(7 * i + k) % 50 for k in range(3 + 5 * i % 23)]


def _run(arm: str, exit: ExitConfig, by_lookup: bool) -> list[object]:
    """Every batch and every applied token of one run; with ``by_lookup`` each batch is
    applied as a copy, so ``apply`` looks its requests up by id."""
    core = EngineCore(make_config(arm, exit=exit, incremental=True))
    ex = SeededExecutor(seed=5)
    for i in range(8):
        core.add_request(f"r{i}", _prompt(i), SamplingParams(max_tokens=2 + i % 5), 0.0)
    trace: list[object] = []
    now = 0.0
    reused = 0
    while core.has_work():
        batch = core.schedule(now)
        assert batch is not None
        result = ex.execute(batch)
        if batch.step % 5 == 2:
            # Abort an in-flight request; every other time its id comes back at once, so the
            # late rows carry a live id of another generation.
            rid = batch.items[len(batch.items) // 2].request_id
            core.abort(rid)
            if batch.step % 10 == 2 and reused < 4:
                reused += 1
                core.add_request(rid, _prompt(reused + 9), SamplingParams(max_tokens=3), now)
        applied = Batch(batch.step, batch.stage, batch.items, batch.housekeeping) \
            if by_lookup else batch
        events = core.apply(applied, result, now + 1.0)
        trace.append(batch_signature(batch))
        trace.append([(e.request_id, e.index, e.token_id, e.exit_depth, e.finish_reason)
                      for e in events])
        trace.append([(r.request_id, r.finish_reason, tuple(r.output_token_ids))
                      for r in core.pop_finished()])
        core.block_manager.check_integrity()
        check_request_kv(core)
        now += 1.0
    assert reused == 4, "the run must reuse ids while their batch is in flight"
    return trace


@pytest.mark.parametrize("exit", EXITS, ids=lambda e: e.mode)
@pytest.mark.parametrize("arm", ARMS)
def test_scheduled_requests_apply_as_the_lookup_does(arm: str, exit: ExitConfig) -> None:
    assert _run(arm, exit, by_lookup=False) == _run(arm, exit, by_lookup=True)
