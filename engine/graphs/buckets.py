"""Which captured row-count bucket a core call replays in, if any (plain Python).

Capture sizes follow vLLM's: 1, 2, 4, then every multiple of 8 up to the largest. A call's
decode rows pad up to the smallest size that holds them (the padding rows are length-1
sequences on a scratch block); in ``mixed`` mode its prompt rows follow, and the total pads
up to the smallest size that holds decode bucket plus prompt rows. A call that fits no size,
or that ``decode`` mode does not cover, runs eager.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

GRAPH_MODES = ("off", "decode", "mixed")


def capture_sizes(max_rows: int) -> list[int]:
    """Row-count buckets up to ``max_rows`` (1, 2, 4, 8, 16, 24, ...), ``max_rows`` last."""
    if max_rows < 1:
        raise ValueError(f"cuda_graphs: max_rows must be at least 1, not {max_rows}")
    sizes = [s for s in (1, 2, 4) if s <= max_rows]
    sizes += range(8, max_rows + 1, 8)
    if sizes[-1] != max_rows:
        sizes.append(max_rows)
    return sizes


@dataclass(frozen=True, slots=True)
class Bucket:
    """A padded call: ``num_decode`` decode rows (real first, padding after), then the real
    prompt rows, then trailing padding rows up to ``num_rows``."""

    num_decode: int
    num_rows: int


def _fit(sizes: Sequence[int], n: int) -> int | None:
    i = bisect.bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


def choose_bucket(mode: str, num_decode: int, num_prompt_rows: int,
                  sizes: Sequence[int]) -> Bucket | None:
    """The bucket of a RECURRENT call with ``num_decode`` decode rows and ``num_prompt_rows``
    prompt rows; None when it runs eager (mode off, prompt rows under ``decode``, no decode
    rows, or too many rows for the largest size)."""
    if mode not in GRAPH_MODES:
        raise ValueError(f"runner.cuda_graphs: {mode!r}; use one of {', '.join(GRAPH_MODES)}")
    if mode == "off" or num_decode < 1 or (num_prompt_rows and mode != "mixed"):
        return None
    padded = _fit(sizes, num_decode)
    if padded is None:
        return None
    if not num_prompt_rows:
        return Bucket(padded, padded)
    total = _fit(sizes, padded + num_prompt_rows)
    return None if total is None else Bucket(padded, total)
