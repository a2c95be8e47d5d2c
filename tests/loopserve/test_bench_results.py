"""vLLM's result keys on hand-computed runs, the ShareGPT sampling rules and the schedule."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.core.columns import TokenTable
from engine.core.records import RequestRecord, RunRecords
from engine.core.results import TokenEvent
from engine.tokenizer import ByteTokenizer
from loopserve.bench.datasets import arrival_offsets, sample_random, sample_sharegpt
from loopserve.commands.args import parse_goodput
from loopserve.outputs.vllm_results import (
    RequestOutcome,
    outcomes_from_records,
    vllm_results,
)

# vllm bench serve's result keys (benchmarks/serve.py), with the default metrics and p99
VLLM_KEYS = {
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors",
    "max_output_tokens_per_s", "max_concurrent_requests",
    *(f"{s}_{m}_ms" for s in ("mean", "median", "std", "p99") for m in ("ttft", "tpot", "itl")),
}

# three requests: A (3 tokens), B (1 token), C failed
A = RequestOutcome(prompt_len=10, success=True, output_tokens=3, ttft=0.1, itl=[0.02, 0.04],
                   latency=0.16, start_s=0.0, generated_text="abc")
B = RequestOutcome(prompt_len=5, success=True, output_tokens=1, ttft=0.3, itl=[],
                   latency=0.3, start_s=1.5, generated_text="d")
C = RequestOutcome(prompt_len=7, error="HTTP 503: busy", start_s=0.5)


def test_every_key_on_a_hand_computed_run() -> None:
    r = vllm_results([A, B, C], 2.0, percentile_metrics=("ttft", "tpot", "itl", "e2el"),
                     percentiles=(50, 99.9), goodput={"ttft": 200, "tpot": 40})
    assert (r["completed"], r["failed"]) == (2, 1)
    assert (r["total_input_tokens"], r["total_output_tokens"]) == (15, 4)
    assert r["request_throughput"] == 1.0 and r["output_throughput"] == 2.0
    assert r["total_token_throughput"] == 9.5
    # A: ttft 100 ms <= 200, tpot (0.16-0.1)/2 = 30 ms <= 40: good; B: ttft 300 ms: not
    assert r["request_goodput"] == 0.5
    assert r["input_lens"] == [10, 5, 7] and r["output_lens"] == [3, 1, 0]
    assert r["ttfts"] == [0.1, 0.3, 0.0] and r["itls"] == [[0.02, 0.04], [], []]
    assert r["generated_texts"] == ["abc", "d", ""] and r["errors"] == ["", "", "HTTP 503: busy"]
    # A's tokens at 0.1, 0.12, 0.16 (second 0), B's at 1.8 (second 1); both active in 1 bucket
    assert r["max_output_tokens_per_s"] == 3.0 and r["max_concurrent_requests"] == 1
    approx = pytest.approx
    assert r["mean_ttft_ms"] == approx(200) and r["median_ttft_ms"] == approx(200)
    assert r["std_ttft_ms"] == approx(100) and r["p50_ttft_ms"] == approx(200)
    assert r["p99.9_ttft_ms"] == approx(100 + 200 * 0.999)
    assert r["mean_tpot_ms"] == approx(30) and r["std_tpot_ms"] == approx(0)  # A only
    assert r["mean_itl_ms"] == approx(30) and r["median_itl_ms"] == approx(30)
    assert r["p99.9_itl_ms"] == approx(20 + 20 * 0.999)
    assert r["mean_e2el_ms"] == approx(230) and r["p50_e2el_ms"] == approx(230)
    assert r["duration"] == 2.0
    per_metric = {f"{s}_{m}_ms" for s in ("mean", "median", "std", "p50", "p99.9")
                  for m in ("ttft", "tpot", "itl", "e2el")}
    assert set(r) == {k for k in VLLM_KEYS if not k.endswith("_ms")} | per_metric


def test_defaults_empty_samples_and_no_goodput() -> None:
    r = vllm_results([C], 1.0)
    assert set(r) == VLLM_KEYS
    assert r["request_goodput"] is None and r["mean_ttft_ms"] == 0.0  # np.mean([0]) as vLLM
    assert (r["max_output_tokens_per_s"], r["max_concurrent_requests"]) == (0.0, 0)


def test_concurrency_buckets_count_overlapping_requests() -> None:
    a = RequestOutcome(1, True, 2, 0.5, [1.0], 1.5, 0.0)
    b = RequestOutcome(1, True, 2, 0.2, [0.2], 0.4, 1.2)
    r = vllm_results([a, b], 2.0)
    assert r["max_concurrent_requests"] == 2  # both active in second 1
    assert r["max_output_tokens_per_s"] == 3.0  # 1.5, 1.4, 1.6 all in second 1


@pytest.mark.parametrize(("items", "message"), [
    (["ttft"], "must be ttft:MS"), (["itl:5"], "must be ttft:MS"),
    (["ttft:fast"], "not a number"), (["e2el:-1"], ">= 0")])
def test_bad_goodput_names_the_flag(items: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=rf"^--goodput: .*{message}"):
        parse_goodput(items)
    assert parse_goodput(["ttft:500", "e2el:2000"]) == {"ttft": 500.0, "e2el": 2000.0}


def test_records_become_outcomes_on_the_engine_clock() -> None:
    rec = RunRecords()
    rec.tokens = TokenTable.of([TokenEvent("a", 0, 1.5, 7, 4), TokenEvent("a", 1, 1.7, 8, 2),
                                TokenEvent("b", 0, 2.0, 9, 4)])
    rec.requests = [
        RequestRecord("a", 1.0, 12, 2, 1.5, 1.7, False, "length", 1.0),
        RequestRecord("b", 1.2, 5, 1, 2.0, 2.0, False, "error", 1.2),
    ]
    a, b = outcomes_from_records(rec)
    assert list(a.itl) == [pytest.approx(0.2)]
    a.itl = list(a.itl)
    assert a == RequestOutcome(12, True, 2, pytest.approx(0.5), [pytest.approx(0.2)],
                               pytest.approx(0.7), 1.0)
    assert not b.success and b.error == "finish_reason error" and b.start_s == 1.2


def _sharegpt(path: Path, pairs: list[tuple[str, str] | tuple[str]]) -> Path:
    path.write_text(json.dumps([{"conversations": [{"from": f, "value": v} for f, v in
                                                   zip(("human", "gpt"), p, strict=False)]}
                                for p in pairs]))
    return path


def test_sharegpt_sampling_applies_vllms_filters(tmp_path: Path) -> None:
    ok = ("x" * 20, "y" * 30)
    f = _sharegpt(tmp_path / "sg.json", [
        ok, ("abc", "y" * 10), ("x" * 10, "yz"), ("x" * 1025, "y" * 10),
        ("x" * 1000, "y" * 1049), ("only one turn",), ("x" * 8, "y" * 5)])
    got = sample_sharegpt(f, 5, ByteTokenizer(256), seed=3)
    assert sorted({(s.prompt_len, s.output_len) for s in got}) == [(8, 5), (20, 30)]
    assert len(got) == 5  # the two kept repeat, in their sampled order
    assert got == sample_sharegpt(f, 5, ByteTokenizer(256), seed=3)
    fixed = sample_sharegpt(f, 2, ByteTokenizer(256), seed=3, output_len=2)
    assert {s.output_len for s in fixed} == {2} and len({s.prompt_len for s in fixed}) >= 1
    with pytest.raises(ValueError, match=r"^--dataset-path: .* no conversation"):
        sample_sharegpt(_sharegpt(tmp_path / "bad.json", [("ab", "cd")]), 1,
                        ByteTokenizer(256), 0)


def test_random_prompts_and_arrival_schedule() -> None:
    reqs = sample_random(50, 100, 20, 0.5, vocab_size=64, seed=1)
    assert all(50 <= r.prompt_len <= 150 and 10 <= r.output_len <= 30 for r in reqs)
    assert all(len(r.prompt) == r.prompt_len and max(r.prompt) < 64 for r in reqs)
    times = arrival_offsets(4000, 50.0, 1.0, seed=2)
    assert times[0] == 0.0 and times == arrival_offsets(4000, 50.0, 1.0, seed=2)
    assert np.mean(np.diff(times)) == pytest.approx(1 / 50, rel=0.05)
    assert arrival_offsets(3, float("inf"), 1.0, 0) == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="^--request-rate"):
        arrival_offsets(3, 0.0, 1.0, 0)


def _dense_peaks(ok: list[RequestOutcome]) -> tuple[float, int]:
    """vLLM's own count: one array slot per second of the span."""
    t0 = min(o.start_s for o in ok)
    span = int(np.ceil(max(o.start_s + o.latency for o in ok) - t0)) + 1
    tokens, active = np.zeros(span), np.zeros(span)
    for o in ok:
        t = o.start_s + o.ttft
        times = [t]
        for g in o.itl:
            t += g
            times.append(t)
        for x in times:
            tokens[int(x - t0)] += 1
        active[int(o.start_s - t0):int(o.start_s + o.latency - t0) + 1] += 1
    return float(tokens.max()), int(active.max())


def test_peaks_equal_the_dense_count_and_stay_bounded_at_low_rates() -> None:
    rng = np.random.default_rng(3)
    for _ in range(30):
        ok = []
        for _ in range(int(rng.integers(1, 12))):
            itl = list(rng.exponential(0.4, size=int(rng.integers(0, 6))))
            ttft = float(rng.exponential(0.5))
            ok.append(RequestOutcome(1, True, 1 + len(itl), ttft, itl, ttft + sum(itl),
                                     float(rng.uniform(0, 6))))
        r = vllm_results(ok, 10.0)
        assert (r["max_output_tokens_per_s"], r["max_concurrent_requests"]) == _dense_peaks(ok)
    # two requests 10^10 s apart (a rate of 1e-10 req/s): no 10^10-slot array
    far = [RequestOutcome(1, True, 2, 0.1, [0.2], 0.3, 0.0),
           RequestOutcome(1, True, 3, 0.1, [0.1, 0.1], 0.3, 1e10)]
    r = vllm_results(far, 1e10)
    assert (r["max_output_tokens_per_s"], r["max_concurrent_requests"]) == (3.0, 1)
