"""``loopserve.stats.population.previous_rows``: the vectorised previous-token rows equal
``TokenTable.previous`` on interleaved requests, and reject out-of-order tokens alike."""

from __future__ import annotations

import random

import pytest

from engine.core.columns import TokenTable
from engine.core.results import TokenEvent
from loopserve.stats.population import previous_rows


def _interleaved(num_requests: int, seed: int) -> TokenTable:
    rng = random.Random(seed)
    left = {f"r{i}": rng.randint(1, 12) for i in range(num_requests)}
    emitted = dict.fromkeys(left, 0)
    events = []
    while left:
        rid = rng.choice(sorted(left))
        events.append(TokenEvent(rid, emitted[rid], len(events) * 0.01, 7, 4, False, None))
        emitted[rid] += 1
        left[rid] -= 1
        if not left[rid]:
            del left[rid]
    return TokenTable.of(events)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_previous_rows_equal_the_token_table_s(seed: int) -> None:
    table = _interleaved(9, seed)
    assert previous_rows(table).tolist() == list(table.previous())


def test_empty_and_out_of_order() -> None:
    assert previous_rows(TokenTable()).tolist() == []
    events = list(_interleaved(3, 0))
    first = next(k for k, e in enumerate(events) if e.index == 1)
    events[first] = TokenEvent(events[first].request_id, 2, 0.0, 7, 4, False, None)
    with pytest.raises(ValueError, match="out of order"):
        previous_rows(TokenTable.of(events))
