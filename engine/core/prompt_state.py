"""Core-side accounting of runner-owned prompt-state handles."""

from __future__ import annotations

from engine.core.request import PromptStateHandle


class PromptStateHandles:
    """Issues opaque handles (never reusing an id) and counts those alive.

    The runner owns the storage, bounded by ``capacity`` x prefill_chunk_size x hidden; it
    learns of releases through ``Housekeeping.released_handles``.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._next_id = 0
        self._live: dict[int, PromptStateHandle] = {}
        self._released: list[PromptStateHandle] = []

    def acquire(self, request_id: str, generation: int) -> PromptStateHandle:
        if len(self._live) >= self.capacity:
            raise RuntimeError(f"prompt-state pool exhausted ({self.capacity} handles)")
        handle = PromptStateHandle(self._next_id, request_id, generation)
        self._next_id += 1
        self._live[handle.handle_id] = handle
        return handle

    def release(self, handle: PromptStateHandle) -> None:
        if self._live.pop(handle.handle_id, None) is not None:
            self._released.append(handle)

    @property
    def num_in_use(self) -> int:
        return len(self._live)

    def redeliver(self, handles: tuple[PromptStateHandle, ...]) -> None:
        """Released handles a failed batch carried, to hand over again (oldest first)."""
        self._released[:0] = handles

    def take_released(self) -> tuple[PromptStateHandle, ...]:
        if not self._released:
            return ()
        out, self._released = tuple(self._released), []
        return out
