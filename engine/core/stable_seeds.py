"""``stable_seed`` per (request, position) and (request, position, depth), at the cost of
one hash update: the hash of each request's part of the key is kept and copied."""

from __future__ import annotations

from collections.abc import Callable
from hashlib import blake2b
from typing import Any

_MAX_REQUESTS = 4096  # kept hashes; a run holds far fewer requests at once
_MAX_CACHED_POSITION = 1 << 15  # encoded key tails are kept for positions below this
_DEPTH_STRIDE = 16  # kept (position, depth) tails: depths below this, flat by position


class StableSeeds:
    """``at(r, p) == stable_seed(*prefix, r, p)`` and ``at_depth(r, p, d) ==
    stable_seed(*prefix, r, p, d)`` for int positions and depths.

    ``stable_seed`` hashes ``repr`` of its parts: the repr of ``(*prefix, request_id)``
    without its closing parenthesis is hashed once per request, and each call copies that
    state and adds ``", p)"`` or ``", p, d)"``, encoded once per position (and depth) and
    kept. The kept states are dropped all at once when ``_MAX_REQUESTS`` requests have one.
    """

    def __init__(self, *prefix: object) -> None:
        self.prefix = prefix
        self._heads: dict[str, Any] = {}
        self._tails: list[bytes] = []
        self._depth_tails: list[bytes | None] = []
        # The hash type's methods, bound once: called on the object, each would be looked up
        # on its type per call.
        self._copy: Callable[[Any], Any] = blake2b.copy
        self._update: Callable[[Any, bytes], None] = blake2b.update
        self._digest: Callable[[Any], bytes] = blake2b.digest
        self._from_bytes: Callable[..., int] = int.from_bytes

    def _head(self, request_id: str) -> Any:
        heads = self._heads
        if len(heads) >= _MAX_REQUESTS:
            heads.clear()
        text = repr((*self.prefix, request_id))[:-1]
        head = heads[request_id] = blake2b(text.encode(), digest_size=8)
        return head

    def _tail(self, position: int) -> bytes:
        if not 0 <= position < _MAX_CACHED_POSITION:
            return f", {position})".encode()
        tails = self._tails
        for p in range(len(tails), position + 1):
            tails.append(f", {p})".encode())
        return tails[position]

    def _depth_tail(self, position: int, depth: int) -> bytes:
        if not (0 <= position < _MAX_CACHED_POSITION and 0 <= depth < _DEPTH_STRIDE):
            return f", {position}, {depth})".encode()
        tails = self._depth_tails
        index = position * _DEPTH_STRIDE + depth
        if index >= len(tails):
            tails.extend([None] * ((position + 1) * _DEPTH_STRIDE - len(tails)))
        tail = tails[index]
        if tail is None:
            tail = tails[index] = f", {position}, {depth})".encode()
        return tail

    def at(self, request_id: str, position: int) -> int:
        head = self._heads.get(request_id)
        if head is None:
            head = self._head(request_id)
        tails = self._tails
        tail = tails[position] if 0 <= position < len(tails) else self._tail(position)
        h = self._copy(head)
        self._update(h, tail)
        return self._from_bytes(self._digest(h), "little")

    def at_depth(self, request_id: str, position: int, depth: int) -> int:
        head = self._heads.get(request_id)
        if head is None:
            head = self._head(request_id)
        tail: bytes | None = None
        if 0 <= depth < _DEPTH_STRIDE:
            tails = self._depth_tails
            index = position * _DEPTH_STRIDE + depth
            if 0 <= index < len(tails):
                tail = tails[index]
        if tail is None:
            tail = self._depth_tail(position, depth)
        h = self._copy(head)
        self._update(h, tail)
        return self._from_bytes(self._digest(h), "little")
