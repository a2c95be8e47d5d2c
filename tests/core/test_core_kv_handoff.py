"""A prefilled request entering a core for decode: WAITING_FOR_REMOTE_KVS (a slot and its KV
blocks held, in no stage queue) until its KV lands, then RUNNING from PRELUDE."""

from __future__ import annotations

from engine.core import EngineCore, RequestStatus, SamplingParams, Stage
from engine.core.kv_handoff import land_prefilled, reserve_prefilled
from engine.core.seeded_executor import SeededExecutor
from tests.helpers import drive, make_config


def test_a_reserved_request_waits_for_its_kv_then_runs_from_prelude() -> None:
    core = EngineCore(make_config("per_depth"))
    params = SamplingParams(max_tokens=3)
    req = reserve_prefilled(core, "a", [1, 2, 3, 4, 5], params, 0.0, 0.5)
    gone = reserve_prefilled(core, "gone", [1, 2], params, 0.0, 0.5)
    assert req is not None and gone is not None
    assert req.status is RequestStatus.WAITING_FOR_REMOTE_KVS and req.stage is Stage.PRELUDE
    s = core.scheduler
    assert core.num_running == 2 and core.num_waiting == 0
    assert not (s.prefill or s.prelude or s.recurrent or s.coda)  # in no queue
    used = core.block_manager.num_used_blocks
    core.abort("gone")  # in flight: its slot and blocks come back
    assert gone.status is RequestStatus.FINISHED and gone.finish_reason == "abort"
    assert core.num_running == 1 and core.block_manager.num_used_blocks < used

    land_prefilled(core, "a", 7, 1.0)
    assert req.status is RequestStatus.RUNNING and s.prelude == [req]
    assert req.num_depths_done == core.num_depths and req.output_token_ids == [7]
    d = drive(core, SeededExecutor())
    assert d.batches[0].stage is Stage.PRELUDE
    assert req.status is RequestStatus.FINISHED and req.num_output_tokens == 3
    assert core.block_manager.num_used_blocks == 0
