"""``stable_seed`` per (request, position) and (request, position, depth), at the cost of
one hash update: the hash of each request's part of the key is kept and copied."""

from __future__ import annotations

from hashlib import blake2b
from typing import Any

_MAX_REQUESTS = 4096  # kept hashes; a run holds far fewer requests at once


class StableSeeds:
    """``at(r, p) == stable_seed(*prefix, r, p)`` and ``at_depth(r, p, d) ==
    stable_seed(*prefix, r, p, d)`` for int positions and depths.

    ``stable_seed`` hashes ``repr`` of its parts: the repr of ``(*prefix, request_id)``
    without its closing parenthesis is hashed once per request, and each call copies that
    state and adds ``", p)"`` or ``", p, d)"``. The kept states are dropped all at once when
    ``_MAX_REQUESTS`` requests have one.
    """

    def __init__(self, *prefix: object) -> None:
        self.prefix = prefix
        self._heads: dict[str, Any] = {}

    def _head(self, request_id: str) -> Any:
        heads = self._heads
        head = heads.get(request_id)
        if head is None:
            if len(heads) >= _MAX_REQUESTS:
                heads.clear()
            text = repr((*self.prefix, request_id))[:-1]
            head = heads[request_id] = blake2b(text.encode(), digest_size=8)
        return head

    def at(self, request_id: str, position: int) -> int:
        h = self._head(request_id).copy()
        h.update(f", {position})".encode())
        return int.from_bytes(h.digest(), "little")

    def at_depth(self, request_id: str, position: int, depth: int) -> int:
        h = self._head(request_id).copy()
        h.update(f", {position}, {depth})".encode())
        return int.from_bytes(h.digest(), "little")
