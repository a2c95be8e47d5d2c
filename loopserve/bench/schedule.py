"""When ``loopserve bench serve`` sends each request: a constant rate or a ramp-up.

Constant rate: the first request at 0, then gamma gaps of shape ``burstiness`` and mean
1 / rate (``loopserve.workloads.base.arrival_times``, the simulator's own draw); rate inf
sends everything at 0; burstiness inf makes every gap exactly 1 / rate.

Ramp-up (``vllm bench serve --ramp-up-strategy``): request ``i`` of ``n`` is drawn at the rate
of the progress ``p = i / max(n - 1, 1)``: ``start + (end - start) * p`` (linear) or
``start * (end / start) ** p`` (exponential); the gap before request ``i`` has mean
1 / rate_i and shape ``burstiness``. The first request leaves at 0, as at a constant rate
(vLLM delays it by one gap), and the schedule is not rescaled (vLLM rescales only constant
rates). ``rps_change_events`` marks each whole rate the ramp passes, as vLLM's result does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from loopserve.workloads.base import arrival_times

RAMP_UP_STRATEGIES = ("linear", "exponential")
MAX_RAMP_UP_RPS = 100_000.0  # bounds rps_change_events (one entry per whole rate)


def arrival_offsets(n: int, request_rate: float, burstiness: float, seed: int) -> list[float]:
    """Send times (s from the start) of ``n`` requests at a constant rate."""
    if not request_rate > 0:
        raise ValueError(f"--request-rate: must be > 0 or inf, got {request_rate}")
    if not burstiness > 0:
        raise ValueError(f"--burstiness: must be > 0, got {burstiness}")
    if math.isinf(request_rate):
        return [0.0] * n
    if math.isinf(burstiness):
        return [i / request_rate for i in range(n)]
    return arrival_times(n, request_rate, burstiness, np.random.default_rng(seed))


def ramp_up_rates(n: int, strategy: str, start_rps: float, end_rps: float) -> np.ndarray:
    """The rate (req/s) request ``i`` is drawn at, for each of ``n`` requests."""
    if strategy not in RAMP_UP_STRATEGIES:
        raise ValueError(f"--ramp-up-strategy: use one of {', '.join(RAMP_UP_STRATEGIES)}")
    if not (0 < start_rps <= end_rps <= MAX_RAMP_UP_RPS):
        raise ValueError("--ramp-up-start-rps: needs 0 < --ramp-up-start-rps <= "
                         f"--ramp-up-end-rps <= {MAX_RAMP_UP_RPS:g}; got {start_rps:g} and "
                         f"{end_rps:g}")
    progress = np.arange(n, dtype=np.float64) / max(n - 1, 1)
    if strategy == "linear":
        return start_rps + (end_rps - start_rps) * progress
    return start_rps * (end_rps / start_rps) ** progress


def ramp_up_offsets(n: int, strategy: str, start_rps: float, end_rps: float,
                    burstiness: float, seed: int) -> list[float]:
    """Send times (s from the start) of ``n`` requests under a ramp-up (module docstring)."""
    if not burstiness > 0:
        raise ValueError(f"--burstiness: must be > 0, got {burstiness}")
    rates = ramp_up_rates(n, strategy, start_rps, end_rps)[1:]
    if math.isinf(burstiness):
        gaps = 1.0 / rates
    else:
        gaps = np.random.default_rng(seed).gamma(burstiness, 1.0 / (rates * burstiness))
    return [0.0, *(float(t) for t in np.cumsum(gaps))][:n]


def rps_change_events(rates: Sequence[float], offsets: Sequence[float],
                      started: datetime) -> list[dict[str, Any]]:
    """vLLM's ``rps_change_events``: ``{"rps", "timestamp"}`` for the ramp's start rate and
    each whole rate it then passes, stamped with the send time of the request that passed
    it (ISO, local time)."""
    last = int(rates[0])
    events = [{"rps": last, "timestamp": started.isoformat()}]
    for rate, offset in zip(rates, offsets, strict=True):
        now = int(rate)
        if now > last:
            stamp = (started + timedelta(seconds=float(offset))).isoformat()
            events += [{"rps": r, "timestamp": stamp} for r in range(last + 1, now + 1)]
            last = now
    return events
