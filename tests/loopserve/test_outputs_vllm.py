"""vllm_results.json's entries: every key of a hand-computed three-request run, goodput from
the scenario's SLO, and a run with no finished request (null, never NaN)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import pytest

from engine.core.records import RequestRecord, RunRecords
from engine.core.results import TokenEvent
from loopserve.outputs.vllm_results import (
    ResultOptions,
    run_vllm_result,
    slo_goodput,
    vllm_run_results,
)
from loopserve.schema.scenario import SloSpec
from loopserve.stats.metrics import RunResult

KEYS = {
    "arm", "target", "point_id", "repeat", "valid",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "max_output_tokens_per_s", "max_concurrent_requests",
    *(f"{s}_{m}_ms" for s in ("mean", "median", "std", "p50", "p90", "p99")
      for m in ("ttft", "tpot", "itl", "e2el")),
}


def _tok(rid: str, i: int, t: float) -> TokenEvent:
    return TokenEvent(rid, i, t, 0, 4, False, None)


def _run(requests: list[RequestRecord], tokens: list[TokenEvent]) -> RunResult:
    rec = RunRecords(tokens=tokens, requests=requests)
    spec = SimpleNamespace(arm="mixed", point_id=1, repeat=2)
    return RunResult(spec=cast(Any, spec), records=rec, invalid_reasons=[],
                     metrics=cast(Any, {}))


def three_requests() -> RunResult:
    # a: 3 tokens at 0.1, 0.12, 0.16 after arriving at 0; b: one token 0.3 s after 1.5;
    # c: aborted with no token (failed)
    return _run([RequestRecord("a", 0.0, 10, 3, 0.1, 0.16, False, "length", 0.0),
                 RequestRecord("c", 0.5, 7, 0, None, 0.9, False, "abort", None),
                 RequestRecord("b", 1.5, 5, 1, 1.8, 1.8, False, "stop", 1.5)],
                [_tok("a", 0, 0.1), _tok("a", 1, 0.12), _tok("a", 2, 0.16), _tok("b", 0, 1.8)])


def test_every_key_of_a_hand_computed_run() -> None:
    r = run_vllm_result(three_requests(), "sim", slo_goodput(SloSpec(ttft_p99_ms=200,
                                                                     itl_p99_ms=40)))
    assert set(r) == KEYS
    approx = pytest.approx
    assert (r["arm"], r["target"], r["point_id"], r["repeat"], r["valid"]) == (
        "mixed", "sim", 1, 2, True)
    assert r["duration"] == approx(1.8)  # first arrival (0) to last finish (1.8)
    assert (r["completed"], r["failed"]) == (2, 1)
    assert (r["total_input_tokens"], r["total_output_tokens"]) == (15, 4)
    assert r["request_throughput"] == approx(2 / 1.8)
    assert r["output_throughput"] == approx(4 / 1.8)
    assert r["total_token_throughput"] == approx(19 / 1.8)
    # a: TTFT 100 <= 200 ms, TPOT 30 <= 40 ms: good; b: TTFT 300 ms: not
    assert r["request_goodput"] == approx(1 / 1.8)
    assert (r["max_output_tokens_per_s"], r["max_concurrent_requests"]) == (3.0, 1)
    expect = {
        "ttft": (200, 200, 100, 200, 280, 298),
        "tpot": (30, 30, 0, 30, 30, 30),
        "itl": (30, 30, 10, 30, 38, 39.8),
        "e2el": (230, 230, 70, 230, 286, 298.6),
    }
    for m, values in expect.items():
        got = [r[f"{s}_{m}_ms"] for s in ("mean", "median", "std", "p50", "p90", "p99")]
        assert got == approx(list(values)), m


def test_goodput_is_null_without_slo_and_counts_each_slo() -> None:
    assert slo_goodput(None) is None and slo_goodput(SloSpec()) is None
    assert slo_goodput(SloSpec(ttft_p99_ms=500)) == {"ttft": 500}
    (r,) = vllm_run_results([three_requests()], "sim", None)
    assert r["request_goodput"] is None
    (r,) = vllm_run_results([three_requests()], "sim", SloSpec(ttft_p99_ms=400))
    assert r["request_goodput"] == pytest.approx(2 / 1.8)  # both TTFTs within 400 ms


def test_a_run_with_no_finished_request_writes_nulls_not_nan() -> None:
    run = _run([RequestRecord("c", 0.5, 7, 0, None, 0.9, False, "abort", None)], [])
    r = run_vllm_result(run, "sim", None)
    assert (r["completed"], r["failed"], r["request_throughput"]) == (0, 1, None)
    json.dumps(r, allow_nan=False)


def test_options_choose_keys_and_goodput_flags_override_the_slo() -> None:
    opts = ResultOptions(percentile_metrics=("e2el", "itl"), percentiles=(90.0, 99.9),
                         goodput={"e2el": 200.0})
    (r,) = vllm_run_results([three_requests()], "sim", SloSpec(ttft_p99_ms=1e-3), opts)
    assert {k for k in r if k.endswith("_ms")} == {
        f"{s}_{m}_ms" for s in ("mean", "median", "std", "p90", "p99.9") for m in ("e2el", "itl")}
    # e2el: a 160 ms <= 200 (good), b 300 ms (not); the slo's 0.001 ms TTFT is not used
    assert r["request_goodput"] == pytest.approx(1 / 1.8)
    assert r["p99.9_e2el_ms"] == pytest.approx(160 + 140 * 0.999)  # between 160 and 300
    assert r["p90_itl_ms"] == pytest.approx(20 + 20 * 0.9)  # a's gaps 20 and 40 ms
