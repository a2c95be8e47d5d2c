"""The tune search: every configuration's capacity by ``loopserve capacity``'s bracket and
bisection (``runs.capacity.search_capacity``), run in rounds with early stopping.

Each configuration's search is replayed from the probes it has (``search_capacity`` over a
``meets`` that answers from them): it either finishes or names the next rate to probe. A
round asks every unfinished configuration for its next rate, then runs all of them (in this
process or as Ray tasks: ``run_round``); what a round does depends only on the probes
before it, so the result is the same however the probes run, and the same when a rerun
reads the probes an interrupted one stored.

Early stopping: a configuration's capacity is below its lowest failed rate (the search
only probes below it). When that bound, in objective units, is at most the K-th best
highest met rate among the other configurations, the configuration cannot enter the top K
and is stopped; the defaults are never stopped, so the gain over them is exact. Met rates only
grow and failed rates only shrink, so a stopped
configuration would have ended strictly below K others: the top K equal an exhaustive
search's (tests/loopserve/test_tune_search.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from loopserve.runs.capacity import Capacity, search_capacity
from loopserve.tune.probe import ProbeResult
from loopserve.tune.space import Config
from loopserve.workloads.base import MIN_REQUEST_RATE


@dataclass(frozen=True)
class Settings:
    """The bracket-and-bisect settings (``loopserve capacity``'s), the number of
    configurations early stopping protects (``top``), and a budget of probes."""

    start: float
    tolerance: float = 0.05
    factor: float = 2.0
    max_steps: int = 10
    top: int = 1
    prune: bool = True
    budget: int | None = None


@dataclass
class Track:
    """One configuration's search so far."""

    config: Config
    gpus: int
    probes: dict[float, ProbeResult] = field(default_factory=dict)
    result: Capacity | None = None
    stopped: str | None = None  # "pruned" or "budget"

    @property
    def low(self) -> float | None:
        met = [r for r, p in self.probes.items() if p.meets]
        return max(met) if met else None

    @property
    def high(self) -> float | None:
        failed = [r for r, p in self.probes.items() if not p.meets]
        return min(failed) if failed else None


class _Need(Exception):
    def __init__(self, rate: float) -> None:
        self.rate = rate


def next_rate(track: Track, s: Settings) -> float | Capacity:
    """The rate the configuration's search probes next, or its finished result."""
    def meets(rate: float) -> bool:
        if rate not in track.probes:
            raise _Need(rate)
        return track.probes[rate].meets

    try:
        return search_capacity(meets, s.start, tolerance=s.tolerance, factor=s.factor,
                               max_steps=s.max_steps, min_rate=MIN_REQUEST_RATE)
    except _Need as need:
        return need.rate


def _cannot_win(track: Track, tracks: Sequence[Track], top: int) -> bool:
    high = track.high
    if high is None:
        return False
    others = sorted((t.low / t.gpus for t in tracks if t is not track and t.low is not None),
                    reverse=True)
    return len(others) >= top and high / track.gpus <= others[top - 1]


RunRound = Callable[[list[tuple[Config, float]]], list[ProbeResult]]


def search(tracks: list[Track], s: Settings, run_round: RunRound,
           stored: Callable[[Config, float], ProbeResult | None] = lambda c, r: None) -> int:
    """Search every track to the end (in place); ``stored`` answers a probe a previous run
    kept. Returns the number of probes run or read."""
    used = sum(len(t.probes) for t in tracks)
    while True:
        wanted: list[tuple[Track, float]] = []
        for track in tracks:
            if track.result is not None or track.stopped:
                continue
            step = next_rate(track, s)
            if isinstance(step, Capacity):
                track.result = step
            elif s.prune and not track.config.is_default and _cannot_win(track, tracks,
                                                                          s.top):
                track.stopped = "pruned"
            else:
                wanted.append((track, step))
        if s.budget is not None:
            for track, _ in wanted[max(0, s.budget - used):]:
                track.stopped = "budget"
            wanted = wanted[:max(0, s.budget - used)]
        if not wanted:
            return used
        todo = []
        for track, rate in wanted:
            kept = stored(track.config, rate)
            if kept is None:
                todo.append((track, rate))
            else:
                track.probes[rate] = kept
        for (track, rate), result in zip(todo, run_round([(t.config, r) for t, r in todo]),
                                         strict=True):
            track.probes[rate] = result
        used += len(wanted)
