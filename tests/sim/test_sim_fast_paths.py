"""On every batch of every arm: the recorder's memoised rows equal StepRecord.from_batch's
(kind and stage by their definitions, strings coded in first-seen order, token rows as
appended one by one), and the roofline's per-call terms (written out apart from the total)
add up to it."""

from __future__ import annotations

import pytest

from engine.core import EngineCore, ExitConfig, SamplingParams
from engine.core.batch import Batch
from engine.core.columns import StepTable, TokenTable
from engine.core.records import RunRecorder
from engine.core.request import Stage
from engine.core.results import StepRecord, step_kind
from engine.core.seeded_executor import SeededExecutor
from engine.core.shapes import TINY
from sim.cost import make_cost_model
from sim.cost.base import StepContext
from sim.exit_model import make_signal_fn
from tests.helpers import Drive, drive, make_config


def _kind_by_definition(b: Batch) -> str:
    if b.stage is not Stage.RECURRENT:
        return b.stage.value.lower()
    if b.is_mixed:
        return "mixed"
    return "decode" if b.num_prompt_items == 0 else "prompt"


def drive_every_stage(arm: str, shortcut: bool) -> Drive:
    """Eight requests of growing prompts and outputs on a small budget, with early exits
    (finalize copies): every stage and step kind of ``arm`` (the recorder tests' load)."""
    exit_cfg = ExitConfig(mode="ouro", exit_threshold=0.4)
    extra = {"prompt_shortcut": True} if shortcut else {}
    cfg = make_config(arm, max_num_seqs=4, max_num_batched_tokens=20, prefill_chunk_size=12,
                      exit=exit_cfg, **extra)  # type: ignore[arg-type]
    core = EngineCore(cfg)
    for i in range(8):
        core.add_request(f"r{i}", list(range(3 + 7 * i)), SamplingParams(max_tokens=2 + i), 0.0)
    ex = SeededExecutor(signal_fn=make_signal_fn(exit_cfg, TINY.num_depths, seed=1))
    return drive(core, ex)  # type: ignore[arg-type]


@pytest.mark.parametrize("arm, shortcut", [("atomic", False), ("per_depth", False),
                                           ("mixed", False), ("mixed", True)])
def test_recorder_rows_and_roofline_terms_on_every_arm(arm: str, shortcut: bool) -> None:
    driven = drive_every_stage(arm, shortcut)
    batches = driven.batches
    stages = {step_kind(b) for b in batches}
    assert {"coda", "prelude", "decode"} <= stages
    assert {"atomic": "prefill", "per_depth": "prompt", "mixed": "mixed"}[arm] in stages
    assert ("prefill" in stages) == (arm == "atomic" or shortcut)
    assert any(b.housekeeping.finalize for b in batches)
    rec = RunRecorder()
    for b in batches:
        rec.step(b, 1.0, 2.0, [])
    rows = [StepRecord.from_batch(b, 1.0, 2.0) for b in batches]
    assert rec.records.steps == rows
    assert [r.kind for r in rows] == [_kind_by_definition(b) for b in batches]
    assert [(r.stage, r.mixed) for r in rows] == [(b.stage.value, b.is_mixed) for b in batches]
    assert rec.records.steps.strings.values == StepTable.of(rows).strings.values
    tokens = TokenTable()
    tokens.extend(driven.events)
    one_by_one = TokenTable()
    for e in driven.events:
        one_by_one.append(e)
    assert len(tokens) > 8 and tokens == one_by_one
    assert (tokens.request_ids.values, tokens.reasons.values) == (
        one_by_one.request_ids.values, one_by_one.reasons.values)
    for hw in ("h200", "cpu"):
        cost = make_cost_model("roofline", TINY, hardware=hw)
        for b in batches:
            t = cost.breakdown(b)
            assert cost.step_time(StepContext(b)) == t["total_s"]
            fixed = t["step_overhead_s"] + t["finalize_s"] + t["host_s"] + t["readback_s"]
            if not b.num_core_calls:
                continue
            if b.num_core_calls == 1:  # one roofline: the larger of memory and compute time
                assert t["total_s"] == pytest.approx(
                    fixed + max(t["memory_s"], t["compute_s"]), rel=1e-12)
            else:  # a sum of per-call maxima lies between max of sums and sum of sums
                assert fixed + max(t["memory_s"], t["compute_s"]) <= t["total_s"] * (1 + 1e-12)
                assert t["total_s"] <= (fixed + t["memory_s"] + t["compute_s"]) * (1 + 1e-12)
