"""Statistics of runs: per-run metrics (``metrics``, with its ``population`` and
``cluster_metrics`` sections) and summary.json's rows and medians (``summary``), built on the
two defined here: a latency metric's distribution over its samples, and how far a median over
repeats can be trusted, its spread over the repeats.

A distribution is ``{mean, p50, p90, p99, max}`` in milliseconds (numpy's default linear
percentiles; every value None without a sample).

A spread is ``{min, max, ci95_low, ci95_high}``: the smallest and largest repeat, and with at
least ``MIN_REPEATS_FOR_INTERVAL`` repeats a 95% percentile-bootstrap interval of the median
(``RESAMPLES`` resamples of the repeats with replacement, numpy's generator seeded with
``BOOTSTRAP_SEED``, so the same values give the same bytes); with fewer repeats the interval is
null and min-max is the spread. Values that are not numbers (None) are left out; a metric
with no number has every field null. With 5 or 6 repeats the interval is usually the whole
min-max range (a resample's median lands on an extreme repeat more than 2.5% of the time);
it narrows from about 7 repeats.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypedDict

import numpy as np

MIN_REPEATS_FOR_INTERVAL = 5
RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
METHOD = (f"min-max over the repeats the median uses; with >= {MIN_REPEATS_FOR_INTERVAL} "
          f"of them also a 95% percentile-bootstrap interval of the median ({RESAMPLES} "
          f"resamples, seed {BOOTSTRAP_SEED})")


class Distribution(TypedDict):
    """One latency metric in milliseconds (every value None when it has no sample)."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


def distribution_ms(values_s: Iterable[float]) -> Distribution:
    """``{mean, p50, p90, p99, max}`` of ``values_s`` in milliseconds."""
    if isinstance(values_s, np.ndarray):  # fromiter would box every element
        arr = values_s.astype(np.float64) * 1e3
    else:
        arr = np.fromiter(values_s, dtype=np.float64) * 1e3
    if arr.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {"mean": float(arr.mean()), "p50": float(p50), "p90": float(p90),
            "p99": float(p99), "max": float(arr.max())}



class Spread(TypedDict):
    """One median's spread (see the module docstring)."""

    min: float | int | None
    max: float | int | None
    ci95_low: float | None
    ci95_high: float | None


def _number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _plain(x: float, like_int: bool) -> float | int:
    return int(x) if like_int and x.is_integer() else x


def spreads(columns: Sequence[Sequence[object]]) -> list[Spread]:
    """The spread of each column (a metric's values over the repeats, in repeat order)."""
    out: list[Spread] = []
    for col in columns:
        nums = [x for x in (_number(v) for v in col) if x is not None]
        like_int = all(isinstance(v, int) for v in col if _number(v) is not None)
        if not nums:
            out.append({"min": None, "max": None, "ci95_low": None, "ci95_high": None})
            continue
        lo, hi = _interval(nums)
        out.append({"min": _plain(min(nums), like_int), "max": _plain(max(nums), like_int),
                    "ci95_low": lo, "ci95_high": hi})
    return out


def _interval(nums: list[float]) -> tuple[float | None, float | None]:
    n = len(nums)
    if n < MIN_REPEATS_FOR_INTERVAL:
        return None, None
    if min(nums) == max(nums):
        return nums[0], nums[0]
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    idx = rng.integers(0, n, size=(RESAMPLES, n))
    medians = np.median(np.asarray(nums)[idx], axis=1)
    lo, hi = np.percentile(medians, [2.5, 97.5])
    return float(lo), float(hi)
