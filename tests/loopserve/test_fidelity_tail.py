"""The tail section of fidelity.json on hand-built runs: which intervals it picks, how it
splits them by step kind, and when it reads the excess as bursts."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from engine.core.columns import TokenTable
from engine.core.results import TokenEvent
from loopserve.fidelity.tail import tail, tail_lines
from loopserve.fidelity.world import WorldRun

GAP_S = 1e-4


class _Cost:
    def gap_time(self, batch: Any) -> float:
        return GAP_S


def _run(kinds: list[str], predicted: list[float], slow: dict[int, float]) -> WorldRun:
    """Steps 0.1 ms apart; step i runs ``slow[i]`` times its prediction (``slow[-1]`` for
    every step not named, default 1). One request gets a token at the end of every decode."""
    t, steps, tokens = 0.0, [], []
    for i, (kind, p) in enumerate(zip(kinds, predicted, strict=True)):
        start = t + (GAP_S if i else 0.0)
        end = start + p * slow.get(i, slow.get(-1, 1.0))
        steps.append(SimpleNamespace(start_s=start, end_s=end, kind=kind))
        if kind == "decode":
            tokens.append(TokenEvent("r", len(tokens), end, 0, 4))
        t = end
    records = SimpleNamespace(steps=steps, tokens=TokenTable.of(tokens))
    spec = SimpleNamespace(arm="mixed", point_id=0, repeat=0)
    return WorldRun(spec, records, [None] * len(steps), {}, predicted_s=list(predicted))  # type: ignore[arg-type]


KINDS = ["decode", "prompt", "decode"] * 100
PRED = [0.010 if k == "decode" else 0.004 for k in KINDS]


def test_the_slowest_percent_is_picked_and_split_by_kind() -> None:
    run = _run(KINDS, PRED, {2: 3.0, 100: 2.0})  # one decode 3x, one prompt 2x
    (r,) = tail([run], _Cost())["runs"]  # type: ignore[arg-type]
    assert r["num_intervals"] == 199
    assert r["num_tail"] == 2  # the two stretched intervals: above the 99th percentile
    # the interval (step 0, step 2]: prompt 4 ms + decode 30 ms + two gaps
    assert r["measured_ms"] == pytest.approx(((4 + 30 + 0.2) + (8 + 10 + 0.2)) / 2)
    dec, prompt = r["by_kind"]["decode"], r["by_kind"]["prompt"]
    assert dec["steps"] == prompt["steps"] == 1
    assert dec["measured_ms"] == pytest.approx(20.0) and dec["predicted_ms"] == pytest.approx(10)
    assert prompt["tail_ratio"] == pytest.approx(1.5) and prompt["run_ratio"] == pytest.approx(1)
    assert r["gap_measured_ms"] == pytest.approx(0.2) == r["gap_predicted_ms"]
    assert r["largest_excess_kind"] == "decode" and r["bursts"] is True
    assert r["predicted_ms"] == pytest.approx(14.2)
    assert r["on_edge"] is False


def test_a_p99_between_two_clusters_is_flagged() -> None:
    """Five stalled intervals in 399 (1.25%): p99 lands on the first of them, p98.5 in the
    body; the statistic jumps by 5x across one percent of intervals."""
    run = _run(["decode"] * 400, [0.010] * 400, {i: 5.0 for i in (50, 120, 200, 280, 350)})
    sec = tail([run], _Cost())  # type: ignore[arg-type]
    (r,) = sec["runs"]
    assert r["threshold_ms"] == pytest.approx(50.1)
    assert r["around_ms"] == pytest.approx([10.1, 50.1])
    assert r["on_edge"] is True
    assert "sits on a cluster edge (p98.5 10.1, p99.5 50.1 ms)" in tail_lines(sec)[2]


def test_a_uniformly_slow_run_is_a_steady_excess_not_bursts() -> None:
    run = _run(KINDS, PRED, {-1: 1.3, 50: 1.35})
    (r,) = tail([run], _Cost())["runs"]  # type: ignore[arg-type]
    dec = r["by_kind"]["decode"]
    assert dec["run_ratio"] == pytest.approx(1.3)
    assert dec["tail_ratio"] == pytest.approx(1.3, rel=0.05)
    assert r["bursts"] is False
    (head, line) = tail_lines(tail([run], _Cost()))  # type: ignore[arg-type]
    assert head.startswith("slowest 1% of token intervals")
    assert "mixed" in line and "[steady excess]" in line and "decode" in line


def test_a_run_without_intervals_is_left_out() -> None:
    run = _run(["prompt", "decode"], [0.004, 0.01], {})
    assert tail([run], _Cost())["runs"] == []  # type: ignore[arg-type]
