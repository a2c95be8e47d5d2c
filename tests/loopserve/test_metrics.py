"""Metrics against hand-computed timelines, and the CSV tables' exact columns."""

from __future__ import annotations

import pytest

from engine.core import StepRecord, TokenEvent
from engine.core.columns import TokenTable
from engine.core.records import RequestRecord, RunRecords
from loopserve.stats.metrics import (
    REQUEST_COLUMNS,
    STEP_COLUMNS,
    TOKEN_COLUMNS,
    requests_frame,
    steps_frame,
    summarize,
    tokens_frame,
)


def _step(i: int, start: float, end: float, stage: str, calls: int, mixed: bool) -> StepRecord:
    return StepRecord(i, start, end, stage, "mixed" if mixed else stage.lower(), calls,
                      1, 1 if mixed else 0, 8 if mixed else 0, 0, "0:2" if mixed else "", mixed)


def _records() -> RunRecords:
    # a: arrives 0, tokens at 1.0, 1.5, 2.5; b: arrives 0.5, one token at 2.0.
    tokens = [
        TokenEvent("a", 0, 1.0, 7, 4),
        TokenEvent("a", 1, 1.5, 3, 2),
        TokenEvent("b", 0, 2.0, 5, 4, True, "length"),
        TokenEvent("a", 2, 2.5, 1, 3, True, "length"),
    ]
    requests = [
        RequestRecord("b", 0.5, 6, 1, 2.0, 2.0, True, "length", 1.0),
        RequestRecord("a", 0.0, 10, 3, 1.0, 2.5, False, "length", 0.0),
    ]
    steps = [
        _step(0, 0.0, 0.8, "PREFILL", 4, False),
        _step(1, 0.8, 1.0, "RECURRENT", 1, True),
        _step(2, 1.0, 1.2, "CODA", 0, False),
    ]
    return RunRecords(steps=steps, tokens=tokens, requests=requests)


def test_summary_matches_hand_computed_values() -> None:
    m = summarize(_records(), num_depths=4)
    # TTFT: a 1.0 s, b 1.5 s
    assert m["ttft_ms"] == pytest.approx(
        {"mean": 1250.0, "p50": 1250.0, "p90": 1450.0, "p99": 1495.0, "max": 1500.0})
    # TPOT: a only, (2.5 - 1.0) / 2
    assert m["tpot_ms"] == pytest.approx(
        {"mean": 750.0, "p50": 750.0, "p90": 750.0, "p99": 750.0, "max": 750.0})
    # ITL: a's gaps 0.5 and 1.0; b has a single token
    assert m["itl_ms"] == pytest.approx(
        {"mean": 750.0, "p50": 750.0, "p90": 950.0, "p99": 995.0, "max": 1000.0})
    # E2EL: a 2.5 s, b 1.5 s
    assert m["e2el_ms"] == pytest.approx(
        {"mean": 2000.0, "p50": 2000.0, "p90": 2400.0, "p99": 2490.0, "max": 2500.0})
    assert m["output_tok_s"] == pytest.approx(4 / 2.5)
    assert m["prompt_token_loops_s"] == pytest.approx(16 * 4 / 2.5)
    assert (m["num_requests"], m["num_core_calls"], m["num_mixed_core_calls"]) == (2, 5, 1)
    assert summarize(_records()) == m  # D read from the first tokens


def test_empty_metrics_are_none() -> None:
    rec = _records()
    rec.tokens = TokenTable.of(t for t in rec.tokens if t.index == 0)
    rec.requests = [r for r in rec.requests if r.request_id == "b"]
    m = summarize(rec)
    assert m["tpot_ms"] == dict.fromkeys(("mean", "p50", "p90", "p99", "max"))
    assert m["itl_ms"]["p99"] is None and m["ttft_ms"]["max"] == pytest.approx(1500.0)
    empty = summarize(RunRecords())
    assert empty["output_tok_s"] is None and empty["num_requests"] == 0


def test_out_of_order_tokens_are_rejected() -> None:
    rec = _records()
    toks = list(rec.tokens)
    toks[0], toks[1] = toks[1], toks[0]
    rec.tokens = TokenTable.of(toks)
    with pytest.raises(ValueError, match="out of order"):
        summarize(rec)


def test_frames_have_the_design_columns_and_stable_csv() -> None:
    rec = _records()
    steps, reqs, toks = steps_frame(rec), requests_frame(rec), tokens_frame(rec)
    assert list(steps.columns) == list(STEP_COLUMNS) == [
        "step", "start_s", "end_s", "stage", "core_calls", "num_decode_items",
        "num_prompt_items", "num_prompt_tokens", "num_fused_prelude_items", "depths", "mixed",
        "max_prompt_items_per_request"]
    assert list(reqs.columns) == list(REQUEST_COLUMNS) == [
        "request_id", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s",
        "finish_s", "injected", "finish_reason"]
    assert list(toks.columns) == list(TOKEN_COLUMNS) == [
        "request_id", "index", "time_s", "token_id", "exit_depth"]
    assert steps["core_calls"].tolist() == [4, 1, 0] and steps["mixed"].tolist() == [
        False, True, False]
    assert reqs["request_id"].tolist() == ["b", "a"] and toks["exit_depth"].tolist() == [
        4, 2, 4, 3]
    assert tokens_frame(_records()).to_csv(index=False) == toks.to_csv(index=False)
    assert toks.to_csv(index=False).splitlines()[1] == "a,0,1.0,7,4"


def test_inter_token_latencies_are_the_token_tables_gaps_bit_for_bit() -> None:
    import random

    import numpy as np

    from loopserve.stats.metrics import inter_token_latencies

    rng = random.Random(3)
    next_index: dict[str, int] = {}
    events = []
    for k in range(2000):  # requests interleaved at random, times not sorted by request
        rid = f"r{rng.randrange(40)}"
        index = next_index.get(rid, 0)
        next_index[rid] = index + 1
        events.append(TokenEvent(rid, index, k * 0.01 + rng.random() * 1e-3, 1, 4))
    records = RunRecords(tokens=events)
    got = inter_token_latencies(records)
    want = np.array(records.tokens.gaps(), dtype=np.float64)
    assert got.dtype == np.float64 and len(got) == 2000 - len(next_index)
    assert got.tobytes() == want.tobytes()
    assert inter_token_latencies(RunRecords()).tobytes() == b""
