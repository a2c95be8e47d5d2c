"""A latency metric's distribution in milliseconds, as summary.json carries every one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict

import numpy as np

__all__ = ["Distribution", "distribution_ms"]


class Distribution(TypedDict):
    """One latency metric in milliseconds (every value None when it has no sample)."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


def distribution_ms(values_s: Iterable[float]) -> Distribution:
    """``{mean, p50, p90, p99, max}`` of ``values_s`` in milliseconds."""
    arr = np.fromiter(values_s, dtype=np.float64) * 1e3
    if arr.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {"mean": float(arr.mean()), "p50": float(p50), "p90": float(p90),
            "p99": float(p99), "max": float(arr.max())}
