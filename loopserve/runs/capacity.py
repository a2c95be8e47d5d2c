"""Capacity search: the highest request rate at which a run still meets its SLO.

``search_capacity(meets, start)`` knows nothing of runs: ``meets(rate)`` is one probe (run the
workload at ``rate`` and check the SLO), assumed monotone (what meets at a rate meets below
it). It brackets first, multiplying or dividing ``start`` by ``factor`` until one rate meets and
one fails (at most ``max_steps`` steps each way), then bisects the bracket until
``(high - low) <= tolerance * low``. ``low``, the highest rate that met, is the capacity; with a
monotone ``meets`` the true boundary lies in ``[low, high)``, so ``low`` is within
``tolerance`` of it, relatively. Probes are deterministic when ``meets`` is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Status = Literal["found", "below_min_rate", "above_max_rate"]
MAX_BISECTIONS = 60  # a float bracket is exhausted long before; bounds a non-monotone meets


@dataclass(frozen=True)
class Probe:
    """One evaluated rate (req/s) and whether its run met the SLO."""

    rate: float
    meets: bool


@dataclass(frozen=True)
class Capacity:
    """The search's outcome.

    ``status`` ``found``: ``low`` met, ``high`` failed, within the tolerance; capacity ``low``.
    ``below_min_rate``: even ``start / factor**max_steps`` failed; capacity None, ``high``
    the lowest failing rate. ``above_max_rate``: even ``start * factor**max_steps`` met;
    capacity ``low`` is a lower bound, ``high`` None.
    """

    status: Status
    low: float | None
    high: float | None
    probes: tuple[Probe, ...]

    @property
    def capacity(self) -> float | None:
        """The highest rate found to meet the SLO (None: none did)."""
        return self.low


def search_capacity(meets: Callable[[float], bool], start: float, *, tolerance: float = 0.05,
                    factor: float = 2.0, max_steps: int = 10, min_rate: float = 0.0) -> Capacity:
    """Bracket from ``start`` then bisect (module docstring); ValueError on bad settings.
    No rate under ``min_rate`` (what a workload accepts) is probed: reaching it ends the
    search as ``below_min_rate``."""
    if not (math.isfinite(start) and start > 0):
        raise ValueError(f"start rate must be a finite number > 0, got {start}")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance}")
    if not (math.isfinite(factor) and factor > 1) or max_steps < 1:
        raise ValueError("factor must be > 1 and max_steps >= 1")
    probes: list[Probe] = []

    def probe(rate: float) -> bool:
        ok = bool(meets(rate))
        probes.append(Probe(rate, ok))
        return ok

    low: float | None = None
    high: float | None = None
    if probe(start):
        low = start
        for _ in range(max_steps):
            rate = low * factor
            if not probe(rate):
                high = rate
                break
            low = rate
        else:
            return Capacity("above_max_rate", low, None, tuple(probes))
    else:
        high = start
        for _ in range(max_steps):
            rate = high / factor
            if rate < min_rate:
                return Capacity("below_min_rate", None, high, tuple(probes))
            if probe(rate):
                low = rate
                break
            high = rate
        else:
            return Capacity("below_min_rate", None, high, tuple(probes))
    assert low is not None and high is not None
    for _ in range(MAX_BISECTIONS):
        if high - low <= tolerance * low:
            break
        mid = (low + high) / 2
        if probe(mid):
            low = mid
        else:
            high = mid
    return Capacity("found", low, high, tuple(probes))
