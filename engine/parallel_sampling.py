"""``n > 1``: n independent samples of one prompt, as n requests of the core.

Sample ``i`` of request ``rid`` runs as request ``f"{rid}-{i}"`` with ``n=1`` and, when the
request brings a seed, the seed ``seed + i`` (vLLM's rule): sample ``i`` of a seeded request
gives the same tokens as a single request with seed ``seed + i``. Without a seed each sample
draws from (engine seed, its own request id, position), so the samples differ.

The samples share the prompt's prefill: samples 1..n-1 are held until sample 0 has its
first token (its prompt blocks are then published), and admitted afterwards they find the
whole prompt but its last token cached. With prefix caching on they find it in the prefix
cache; without it every sample is added to the core with ``prefix_group`` set to sample 0's
id, and the block manager shares the prompt blocks within that group only (dropped once no
sample holds them). A sample 0 that finishes at its first token leaves nothing to share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Generic, TypeVar

from engine.core.request import SamplingParams
from engine.core.results import TokenEvent

T = TypeVar("T")


def sample_request_id(request_id: str, index: int, n: int) -> str:
    """The core's request id of sample ``index`` (the request's own id when n == 1)."""
    return request_id if n == 1 else f"{request_id}-{index}"


def sample_params(params: SamplingParams, index: int) -> SamplingParams:
    """The params of sample ``index``: n=1 and the derived seed."""
    seed = None if params.seed is None else params.seed + index
    return dataclasses.replace(params, n=1, seed=seed)


class HeldSamples(Generic[T]):
    """Samples waiting for their leader (sample 0) to have a first token or to finish."""

    def __init__(self) -> None:
        self._held: dict[str, list[tuple[str, T]]] = {}

    def hold(self, leader_id: str, request_id: str, item: T) -> None:
        self._held.setdefault(leader_id, []).append((request_id, item))

    def drop(self, request_id: str) -> bool:
        """Forget a held sample (aborted before admission); True when it was held."""
        for leader, items in self._held.items():
            kept = [(rid, it) for rid, it in items if rid != request_id]
            if len(kept) != len(items):
                self._held[leader] = kept
                return True
        return False

    def release(self, events: Iterable[TokenEvent], finished_ids: Iterable[str] = ()) -> list[T]:
        """Held samples whose leader produced a token or finished (any reason)."""
        if not self._held:
            return []
        out: list[T] = []
        for rid in [*(ev.request_id for ev in events), *finished_ids]:
            items = self._held.pop(rid, None)
            if items:
                out += [it for _, it in items]
        return out

    def leaders(self) -> list[str]:
        return list(self._held)

    def __len__(self) -> int:
        return sum(len(v) for v in self._held.values())
