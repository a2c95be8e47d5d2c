"""The capacity search over a callable: bracketing then bisection on synthetic monotone
functions, the statuses at both ends, bad settings, determinism and bounded probing."""

from __future__ import annotations

import math

import pytest

from loopserve.runs.capacity import MAX_BISECTIONS, search_capacity


def below(limit: float):  # type: ignore[no-untyped-def]
    return lambda rate: rate <= limit


@pytest.mark.parametrize("start", [0.5, 10.0, 37.3, 1000.0])
@pytest.mark.parametrize("tolerance", [0.2, 0.05, 0.001])
def test_brackets_then_bisects_to_the_tolerance(start: float, tolerance: float) -> None:
    got = search_capacity(below(37.3), start, tolerance=tolerance)
    assert got.status == "found"
    assert got.low is not None and got.high is not None
    assert got.low <= 37.3 < got.high  # the boundary is inside the final bracket
    assert got.high - got.low <= tolerance * got.low
    assert got.capacity == got.low and abs(got.low - 37.3) <= tolerance * 37.3
    met = [p.rate for p in got.probes if p.meets]
    missed = [p.rate for p in got.probes if not p.meets]
    assert max(met) == got.low and min(missed) == got.high
    assert len({p.rate for p in got.probes}) == len(got.probes)  # no rate probed twice


def test_probe_order_from_below() -> None:
    got = search_capacity(below(37.3), 10.0, tolerance=0.05)
    rates = [p.rate for p in got.probes]
    # doubling 10 -> 20 -> 40 (fails), then halving the bracket [20, 40)
    assert rates[:5] == [10.0, 20.0, 40.0, 30.0, 35.0]
    assert rates == [p.rate for p in search_capacity(below(37.3), 10.0).probes]  # same again


def test_ends_of_the_range() -> None:
    up = search_capacity(lambda r: True, 1.0, factor=2.0, max_steps=5)
    assert (up.status, up.low, up.high) == ("above_max_rate", 32.0, None)
    assert [p.rate for p in up.probes] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    down = search_capacity(lambda r: False, 1.0, factor=4.0, max_steps=3)
    assert (down.status, down.low, down.high, down.capacity) == (
        "below_min_rate", None, 1 / 64, None)
    assert len(down.probes) == 4


def test_non_monotone_probes_still_terminate() -> None:
    calls: list[float] = []

    def noisy(rate: float) -> bool:
        calls.append(rate)
        return math.sin(rate * 7.0) > 0 or rate < 3  # meets on and off above 3

    got = search_capacity(noisy, 1.0, tolerance=1e-12, max_steps=10)
    assert len(calls) <= 1 + 10 + MAX_BISECTIONS
    assert got.low is not None and noisy(got.low)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"start": 0.0}, "start rate"), ({"start": math.inf}, "start rate"),
    ({"tolerance": 0.0}, "tolerance"), ({"tolerance": 1.0}, "tolerance"),
    ({"factor": 1.0}, "factor"), ({"max_steps": 0}, "factor"),
])
def test_bad_settings(kwargs: dict[str, float], message: str) -> None:
    args = {"start": 1.0, **kwargs}
    start = args.pop("start")
    with pytest.raises(ValueError, match=message):
        search_capacity(below(2.0), start, **args)  # type: ignore[arg-type]


def test_no_rate_under_the_minimum_is_probed() -> None:
    # a start just above the workloads' minimum rate: one step down would fall under it
    got = search_capacity(below(0.0), 1.5e-6, factor=2.0, min_rate=1e-6)
    assert got.status == "below_min_rate" and got.capacity is None
    assert [p.rate for p in got.probes] == [1.5e-6] and got.high == 1.5e-6
