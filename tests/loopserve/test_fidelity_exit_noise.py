"""The exit section's request-sampling noise: a bootstrap over the measured requests (each
request's tokens kept together), seeded, zero when every request exits alike, and growing
when requests differ and are few."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from engine.core.results import TokenEvent
from loopserve.fidelity.exits import request_loops, request_noise
from loopserve.fidelity.world import WorldRun


def _run(depths_by_request: dict[str, list[int]]) -> WorldRun:
    tokens = [TokenEvent(rid, i + 1, 0.0, 0, d, False, None)
              for rid, ds in depths_by_request.items() for i, d in enumerate(ds)]
    # A first token (index 0) runs all depths and is left out.
    tokens += [TokenEvent(rid, 0, 0.0, 0, 4, False, None) for rid in depths_by_request]
    return cast(WorldRun, SimpleNamespace(records=SimpleNamespace(tokens=tokens)))


def test_requests_that_exit_alike_have_no_noise() -> None:
    noise = request_noise([_run({f"r{i}": [2, 3] * 5 for i in range(6)})], 4)
    assert noise == {"num_requests": 6, "tv_p50": 0.0, "tv_p95": 0.0}


def test_few_unlike_requests_are_noisier_than_many() -> None:
    few = request_noise([_run({"a": [1] * 20, "b": [3] * 20})], 4)
    many = request_noise([_run({f"r{i}": [1 if i % 2 else 3] * 20 for i in range(200)})], 4)
    assert few["num_requests"] == 2 and many["num_requests"] == 200
    assert few["tv_p50"] is not None and many["tv_p95"] is not None
    # Two requests: a resample is both a, both b (TV 0.5) or one each (0), half the time.
    assert few["tv_p95"] == 0.5
    assert 0.0 < many["tv_p95"] < 0.1 < few["tv_p95"]


def test_the_same_request_id_in_two_runs_is_two_requests() -> None:
    runs = [_run({"a": [1] * 10}), _run({"a": [3] * 10})]
    assert request_noise(runs, 4)["num_requests"] == 2


def test_seeded_and_empty() -> None:
    runs: list[Any] = [_run({f"r{i}": [1 + i % 4] * (1 + i) for i in range(12)})]
    assert request_noise(runs, 4) == request_noise(runs, 4)
    assert request_noise([_run({})], 4) == {"num_requests": 0, "tv_p50": None, "tv_p95": None}


def test_two_samples_differ_more_than_one_sample_from_its_source() -> None:
    runs = [_run({f"r{i}": [1 + (i * 7) % 3] * (5 + i % 4) for i in range(40)})]
    one, two = request_noise(runs, 4), request_noise(runs, 4, two_sample=True)
    assert one["tv_p50"] is not None and two["tv_p50"] is not None
    assert one["tv_p50"] < two["tv_p50"] < 2 * one["tv_p50"]


def test_request_loops_spread_over_requests_not_tokens() -> None:
    # Half the requests run 1 loop, half 3: a wide spread at the same token mix (mean 2) ...
    apart = request_loops([_run({f"r{i}": [1 + 2 * (i % 2)] * 10 for i in range(10)})], 4)
    assert apart == {"num_requests": 10, "p10": 1.0, "p50": 2.0, "p90": 3.0, "sd": 1.0}
    # ... as every request alternating 1 and 3 has none.
    alike = request_loops([_run({f"r{i}": [1, 3] * 5 for i in range(10)})], 4)
    assert alike == {"num_requests": 10, "p10": 2.0, "p50": 2.0, "p90": 2.0, "sd": 0.0}
    assert request_loops([_run({})], 4)["sd"] is None
