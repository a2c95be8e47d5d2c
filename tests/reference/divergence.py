"""First-divergence reports for comparing runs whose outputs need not be bitwise equal."""

from __future__ import annotations

from collections.abc import Sequence

Output = tuple[list[int], list[int]]  # (token ids, exit depths)


def first_divergence(a: Output, b: Output) -> tuple[int, str] | None:
    """(output index, what differs) of the first token or exit depth that differs, or None."""
    for i, (ta, tb, da, db) in enumerate(zip(a[0], b[0], a[1], b[1], strict=False)):
        if da != db:
            return i, f"exit depth {da} vs {db}"
        if ta != tb:
            return i, f"token {ta} vs {tb}"
    if len(a[0]) != len(b[0]):
        return min(len(a[0]), len(b[0])), f"length {len(a[0])} vs {len(b[0])}"
    return None


def divergence_report(name_a: str, runs_a: Sequence[Output], name_b: str,
                      runs_b: Sequence[Output]) -> list[str]:
    """One line per request whose outputs differ between two runs."""
    lines = []
    for r, (a, b) in enumerate(zip(runs_a, runs_b, strict=True)):
        d = first_divergence(a, b)
        if d is not None:
            lines.append(f"request {r}: {name_a} vs {name_b} first differ at output {d[0]}: {d[1]}")
    return lines
