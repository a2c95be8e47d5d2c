"""summary.json's ``exit_depth_counts``: per (point, arm), how many decode tokens ran 1, 2,
..., D loops, summed over repeats. Compact (D numbers per arm and point) so the report can
plot exit depths without the per-token table (tokens.csv is optional). The first output
token of a request always runs all D loops (it comes from the prompt) and is left out, as
in fidelity's exits section."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from loopserve.runs.loop import RunResult


class ExitDepthCounts(TypedDict):
    """One entry: ``counts[d - 1]`` decode tokens ran ``d`` loops."""

    point_id: int
    arm: str
    counts: list[int]


def exit_depth_counts(results: Sequence[RunResult], arms: Sequence[str],
                      num_depths: int) -> list[ExitDepthCounts]:
    """Entries in point then arm order (the order of summary.json's medians)."""
    sums: dict[tuple[int, str], list[int]] = {}
    for r in results:
        counts = sums.setdefault((r.spec.point_id, r.spec.arm), [0] * num_depths)
        for tok in r.records.tokens:
            if tok.index > 0:
                counts[tok.exit_depth - 1] += 1
    return [{"point_id": p, "arm": arm, "counts": sums[p, arm]}
            for p in sorted({p for p, _ in sums}) for arm in arms if (p, arm) in sums]
