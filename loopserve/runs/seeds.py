"""Seeds of a run's repeats (shared by planning and by the exit profile of a workload)."""

from __future__ import annotations

from engine.core.exits import stable_seed


def repeat_seed(seed: int, repeat: int) -> int:
    """The seed of repeat ``repeat``: the scenario's own seed for repeat 0 (so a one-repeat
    run is that seed's run), else a hash of (seed, repeat), so no two (seed, repeat) pairs
    share draws (``seed + repeat`` would make seed 0's repeat 1 seed 1's repeat 0)."""
    return seed if repeat == 0 else stable_seed(seed, "repeat", repeat) >> 1
