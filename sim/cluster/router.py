"""Routers: which replica a request goes to, decided when it arrives from what a real
router sees then (the requests it has sent and not yet seen finish, each replica's free KV,
the prompt). Ties go to a seeded draw, so a run is deterministic for its seed."""

from __future__ import annotations

import random
from collections.abc import Sequence
from hashlib import blake2b
from typing import Protocol


class ReplicaView(Protocol):
    """What a router may read of a replica."""

    @property
    def num_outstanding(self) -> int:
        """Requests routed to it and not finished (queued, running or in transfer)."""

    @property
    def num_free_blocks(self) -> int:
        """KV blocks it reports free."""


class Router:
    """Picks one of ``candidates`` (replica views) for a prompt."""

    def __init__(self, kind: str, seed: int, block_size: int, affinity_blocks: int) -> None:
        self.kind = kind
        self.rng = random.Random(seed)
        self.seed = seed
        self.block_size = block_size
        self.affinity_blocks = affinity_blocks
        self._next = 0

    def pick(self, candidates: Sequence[ReplicaView], prompt: Sequence[int]) -> int:
        """The index into ``candidates`` the request goes to."""
        n = len(candidates)
        if n == 1:
            return 0
        kind = self.kind
        if kind == "round_robin":
            i = self._next % n
            self._next += 1
            return i
        if kind == "prefix_affinity":
            head = tuple(prompt[: self.block_size * self.affinity_blocks])
            digest = blake2b(repr((self.seed, head)).encode(), digest_size=8).digest()
            return int.from_bytes(digest, "little") % n
        if kind == "least_outstanding":
            loads = [c.num_outstanding for c in candidates]
            best = min(loads)
        else:  # least_kv: the most free blocks
            loads = [-c.num_free_blocks for c in candidates]
            best = min(loads)
        tied = [i for i, v in enumerate(loads) if v == best]
        return tied[0] if len(tied) == 1 else self.rng.choice(tied)
