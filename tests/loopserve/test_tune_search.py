"""The tune search without simulation: configurations with known capacities (a probe meets
when its rate is at most the capacity). Early stopping keeps the exhaustive search's top K,
the defaults are searched to the end, resumed searches read stored probes, and a budget stops
what is left."""

from __future__ import annotations

import random

import pytest

from loopserve.runs.capacity import search_capacity
from loopserve.tune.probe import ProbeResult
from loopserve.tune.search import Settings, Track, search
from loopserve.tune.space import Config


def _tracks(caps: list[float], default: int = 0) -> list[Track]:
    return [Track(Config(i, {"arm": "mixed", "x": i}, i == default, None), 1)
            for i in range(len(caps))]


def _run(caps: list[float], s: Settings, log: list[tuple[int, float]] | None = None,
         stored: dict[tuple[int, float], ProbeResult] | None = None) -> list[Track]:
    tracks = _tracks(caps)

    def run_round(todo: list[tuple[Config, float]]) -> list[ProbeResult]:
        out = []
        for c, rate in todo:
            out.append(ProbeResult(rate, rate <= caps[c.config_id], True))
            if log is not None:
                log.append((c.config_id, rate))
        return out

    search(tracks, s, run_round,
           lambda c, r: None if stored is None else stored.get((c.config_id, r)))
    return tracks


def _top(tracks: list[Track], k: int) -> list[tuple[int, float | None]]:
    done = [t for t in tracks if t.result is not None and t.result.capacity is not None]
    done.sort(key=lambda t: (-(t.result.capacity or 0), t.config.config_id))  # type: ignore[union-attr]
    return [(t.config.config_id, t.result.capacity) for t in done[:k]]  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("top", [1, 3])
def test_pruned_search_keeps_the_exhaustive_top_k(seed: int, top: int) -> None:
    rng = random.Random(seed)
    caps = [round(rng.uniform(0.5, 40), 2) for _ in range(24)]
    caps[5] = caps[9]  # a tie: the earlier configuration ranks first in both
    full = _run(caps, Settings(start=4.0, prune=False))
    pruned = _run(caps, Settings(start=4.0, top=top))
    assert _top(pruned, top) == _top(full, top)
    stopped = [t for t in pruned if t.stopped == "pruned"]
    assert stopped, "the grid is spread wide: some configurations stop early"
    assert sum(len(t.probes) for t in pruned) < sum(len(t.probes) for t in full)
    for t in stopped:  # a stopped configuration really could not reach the top K
        assert t.high is not None and caps[t.config.config_id] < t.high
    # each finished search is exactly the standalone capacity search
    for t in pruned:
        if t.result is not None:
            alone = search_capacity(lambda r, c=caps[t.config.config_id]: r <= c, 4.0)
            assert t.result == alone


def test_the_default_is_never_stopped() -> None:
    caps = [0.7, 30.0, 31.0, 29.0]
    tracks = _run(caps, Settings(start=4.0))
    assert tracks[0].result is not None and tracks[0].result.status == "found"
    assert any(t.stopped == "pruned" for t in tracks[1:])


def test_a_resumed_search_runs_only_the_missing_probes() -> None:
    caps = [3.0, 9.0, 17.0, 1.5, 12.0]
    first: list[tuple[int, float]] = []
    whole = _run(caps, Settings(start=4.0), first)
    # an interrupt after some probes: their results are kept
    kept = {(c, r): ProbeResult(r, r <= caps[c], True) for c, r in first[:7]}
    again: list[tuple[int, float]] = []
    resumed = _run(caps, Settings(start=4.0), again, kept)
    assert again == first[7:]
    assert [(t.result, t.stopped) for t in resumed] == [(t.result, t.stopped) for t in whole]


def test_a_budget_stops_the_searches_left() -> None:
    caps = [3.0, 9.0, 17.0, 1.5, 12.0]
    log: list[tuple[int, float]] = []
    tracks = _run(caps, Settings(start=4.0, budget=8), log)
    assert len(log) == 8
    left = [t.stopped for t in tracks if t.result is None]
    assert "budget" in left and None not in left
