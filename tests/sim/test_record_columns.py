"""The record tables' public columns, on every arm: what ``RunRecorder.step`` records through
the pending rows (engine.core.row_table) equals columns built here straight from
``StepRecord.from_batch``'s rows and the token events, typecode by typecode and value by value,
whether the columns are read once at the end or also in between."""

from __future__ import annotations

from array import array

import pytest

from engine.core.batch import Batch
from engine.core.columns import StepTable, TokenTable
from engine.core.records import RunRecorder
from engine.core.request import Stage
from engine.core.results import StepRecord, TokenEvent
from engine.core.row_table import FLOAT_CHUNK
from tests.sim.test_sim_fast_paths import drive_every_stage

STEP_COLUMNS = {  # column: (typecode, StepRecord field); stage, kind, depths are codes
    "step": "q", "start_s": "d", "end_s": "d", "stage": "b", "kind": "b", "core_calls": "i",
    "num_decode_items": "i", "num_prompt_items": "i", "num_prompt_tokens": "i",
    "num_fused_prelude_items": "i", "depths": "i", "mixed": "b", "num_readbacks": "i",
    "max_prompt_items_per_request": "i",
}
TOKEN_COLUMNS = {"request": "i", "index": "i", "time_s": "d", "token_id": "i",
                 "exit_depth": "b", "finished": "b", "finish_reason": "b"}


def _driven(arm: str, shortcut: bool) -> tuple[list[Batch], list[TokenEvent]]:
    driven = drive_every_stage(arm, shortcut)
    return list(driven.batches), list(driven.events)


def _expected_steps(rows: list[StepRecord]) -> tuple[dict[str, array], list[str]]:
    words: dict[str, int] = {}
    cols: dict[str, list] = {name: [] for name in STEP_COLUMNS}
    for r in rows:
        for name in STEP_COLUMNS:
            value = getattr(r, name)
            if name in ("stage", "kind", "depths"):
                value = words.setdefault(value, len(words))
            cols[name].append(int(value) if name == "mixed" else value)
    return {n: array(tc, cols[n]) for n, tc in STEP_COLUMNS.items()}, list(words)


def _expected_tokens(events: list[TokenEvent]) -> tuple[dict[str, array], list[str], list[str]]:
    ids: dict[str, int] = {}
    reasons: dict[str, int] = {}
    cols: dict[str, list] = {name: [] for name in TOKEN_COLUMNS}
    for e in events:
        cols["request"].append(ids.setdefault(e.request_id, len(ids)))
        for name in ("index", "time_s", "token_id", "exit_depth"):
            cols[name].append(getattr(e, name))
        cols["finished"].append(int(e.finished))
        reason = e.finish_reason
        cols["finish_reason"].append(
            -1 if reason is None else reasons.setdefault(reason, len(reasons)))
    return ({n: array(tc, cols[n]) for n, tc in TOKEN_COLUMNS.items()}, list(ids),
            list(reasons))


@pytest.mark.parametrize("arm, shortcut", [("atomic", False), ("per_depth", False),
                                           ("mixed", False), ("mixed", True),
                                           ("wavefront", False)])
@pytest.mark.parametrize("read_between", [False, True])
def test_recorded_columns_equal_the_reference_rows(arm: str, shortcut: bool,
                                                   read_between: bool) -> None:
    batches, events = _driven(arm, shortcut)
    if arm == "wavefront":
        assert any(StepRecord.from_batch(b, 0.0, 0.0).max_prompt_items_per_request > 1
                   for b in batches)
    # extra finishes: every reason code and both flags go through the status byte
    events += [TokenEvent("late", 0, 0.1, 7, 2), TokenEvent("late", 1, 0.2, 2**31 - 1, 3,
                                                            True, "abort"),
               TokenEvent("r0", 99, 0.3, 0, 1, False, "stop"), TokenEvent("z", 0, 1e-9, 5, 4)]
    rec = RunRecorder()
    rows: list[StepRecord] = []
    fed: list[TokenEvent] = []
    k = 0
    for rep in range(3):  # past FLOAT_CHUNK rows, with steps reused under new times
        for i, b in enumerate(batches):
            start, end = (rep * 1000 + i) / 7, (rep * 1000 + i + 0.5) / 3
            step_events = events[k:k + 2] if rep == 0 else []
            k += len(step_events)
            rec.step(b, start, end, step_events)
            rows.append(StepRecord.from_batch(b, start, end))
            fed += step_events
            if read_between and i % 37 == 5:
                assert len(rec.records.steps.core_calls) == len(rows)
                assert len(rec.records.tokens.time_s) == len(fed)
    rec.step(batches[0], 1.0, 2.0, events[k:])
    rows.append(StepRecord.from_batch(batches[0], 1.0, 2.0))
    fed += events[k:]
    assert len(rows) > FLOAT_CHUNK and fed == events
    steps, tokens = rec.records.steps, rec.records.tokens
    assert len(steps) == len(rows) and len(tokens) == len(events)
    want, words = _expected_steps(rows)
    for name, column in want.items():
        assert getattr(steps, name) == column, name  # array equality includes the typecode
    assert steps.strings.values == words
    assert list(steps) == rows and steps[-1] == rows[-1] and steps == StepTable.of(rows)
    assert rec.records.num_core_calls == sum(r.core_calls for r in rows)
    assert rec.records.num_mixed_core_calls == sum(r.mixed for r in rows)
    assert (rec.records.num_mixed_core_calls > 0) == (arm in ("mixed", "wavefront"))
    want, ids, reasons = _expected_tokens(events)
    for name, column in want.items():
        assert getattr(tokens, name) == column, name
    assert (tokens.request_ids.values, tokens.reasons.values) == (ids, reasons)
    assert list(tokens) == events and tokens == TokenTable.of(events)


def test_step_numbers_past_32_bits_keep_their_value() -> None:
    batches = [Batch(2**40 + 3, Stage.PRELUDE, ()), Batch(7, Stage.CODA, ()),
               Batch(2**63 - 1, Stage.PRELUDE, ())]
    table = StepTable()
    for b in batches:
        table.add_batch(b, 0.5, 1.5)
    assert table.step == array("q", [b.step for b in batches])
    assert list(table) == [StepRecord.from_batch(b, 0.5, 1.5) for b in batches]


def test_values_past_the_columns_range_are_refused_not_wrapped() -> None:
    table = StepTable()
    with pytest.raises(OverflowError, match="step 5"):
        table.add_batch(Batch(5, Stage.PRELUDE, ()), 0.0, 1.0, num_readbacks=2**31)
    with pytest.raises(OverflowError):
        table.add_batch(Batch(7, Stage.PRELUDE, ()), 0.0, 1.0, num_readbacks=-1)
    with pytest.raises(OverflowError, match="step 9223372036854775808"):
        table.add_batch(Batch(2**63, Stage.PRELUDE, ()), 0.0, 1.0)
    table.add_batch(Batch(6, Stage.PRELUDE, ()), 0.0, 1.0, num_readbacks=2**31 - 1)
    assert list(table.num_readbacks) == [2**31 - 1]
    assert len(table) == len(table.start_s) == len(table.end_s) == 1  # refused rows add nothing
    tokens = TokenTable()
    for bad in (TokenEvent("r", 0, 0.0, 2**31, 4), TokenEvent("r", 2**31, 0.0, 1, 4),
                TokenEvent("r", 0, 0.0, 1, 128)):
        with pytest.raises(OverflowError, match="of r"):
            tokens.append(bad)
    with pytest.raises(OverflowError):
        tokens.append(TokenEvent("r", 0, 0.0, -1, 4))
    tokens.append(TokenEvent("r", 0, 0.0, 2**31 - 1, 127, True, "stop"))
    assert list(tokens) == [TokenEvent("r", 0, 0.0, 2**31 - 1, 127, True, "stop")]
    assert len(tokens) == len(tokens.time_s) == 1
