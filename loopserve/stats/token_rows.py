"""A run's token rows as numpy arrays over ``TokenTable``'s columns, for the metrics that read
every token: each column viewed without a copy, and each row's previous token of the same
request (``TokenTable.previous``, vectorised)."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

from engine.core.columns import TokenTable


def view(column: array[Any]) -> np.ndarray:
    """A record column as numpy without a copy, in its own width (int8 .. int64, float64)."""
    dtype = np.dtype(column.typecode)
    return np.frombuffer(column, dtype=dtype) if len(column) else np.empty(0, dtype)


def previous_rows(tokens: TokenTable) -> np.ndarray:
    """Per row, the row of the same request's previous token (-1 for its first), as
    ``TokenTable.previous``; ValueError (from it, naming the request) when a request's tokens
    are out of order."""
    request, index = view(tokens.request), view(tokens.index).astype(np.int64)
    rows = np.argsort(request, kind="stable")  # each request's rows, in row order
    same = request[rows[1:]] == request[rows[:-1]]
    later, earlier = rows[1:][same], rows[:-1][same]
    if not np.array_equal(index[later], index[earlier] + 1):
        tokens.previous()  # raises, naming the first request out of order
    prev = np.full(len(request), -1, dtype=np.int64)
    prev[later] = earlier
    return prev
