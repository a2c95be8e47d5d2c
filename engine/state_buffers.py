"""Runner-owned hidden-state storage behind the core's opaque handles.

``PromptStateBuffers``: one slot of [prefill_chunk_size, hidden] per live prompt item, bounded
by ``EngineConfig.max_prompt_states`` (RFC §1: max_num_seqs, times the chunks one request may
have in flight under the wavefront arm). ``DecodeStateBuffers``: each running request's
one-row hidden state. Both map ids to preallocated slots, so a step gathers and scatters with
one indexed op.
"""

from __future__ import annotations

import torch

from engine.core.request import PromptStateHandle


class _Slots:
    def __init__(self, num_slots: int, what: str) -> None:
        self._free = list(range(num_slots - 1, -1, -1))
        self.num_slots = num_slots
        self.what = what

    def take(self) -> int:
        if not self._free:
            raise RuntimeError(f"{self.what}: all {self.num_slots} slots are in use")
        return self._free.pop()

    def give(self, slot: int) -> None:
        self._free.append(slot)


class PromptStateBuffers:
    """Hidden state of prompt items between depths: handle id -> slot.

    Handle ids are never reused by the core, so a reused request id cannot reach an old slot.
    """

    def __init__(
        self, num_slots: int, max_tokens: int, hidden_size: int,
        device: torch.device | str, dtype: torch.dtype,
    ) -> None:
        self.max_tokens = max_tokens
        self.hidden = torch.zeros(num_slots, max_tokens, hidden_size, device=device, dtype=dtype)
        self._slots = _Slots(num_slots, "prompt-state pool")
        self._by_handle: dict[int, int] = {}

    @property
    def num_in_use(self) -> int:
        return len(self._by_handle)

    def is_live(self, handle: PromptStateHandle) -> bool:
        return handle.handle_id in self._by_handle

    def read(self, handle: PromptStateHandle, num_tokens: int) -> torch.Tensor:
        slot = self._by_handle.get(handle.handle_id)
        if slot is None:
            raise RuntimeError(
                f"prompt state {handle.handle_id} of request {handle.request_id!r} holds no data"
            )
        return self.hidden[slot, :num_tokens]

    def write(self, handle: PromptStateHandle, rows: torch.Tensor) -> None:
        """Store a prompt item's rows, taking a slot on first use."""
        if rows.shape[0] > self.max_tokens:
            raise RuntimeError(f"prompt item of {rows.shape[0]} rows exceeds {self.max_tokens}")
        slot = self._by_handle.get(handle.handle_id)
        if slot is None:
            slot = self._by_handle[handle.handle_id] = self._slots.take()
        self.hidden[slot, : rows.shape[0]] = rows

    def release(self, handle: PromptStateHandle) -> None:
        slot = self._by_handle.pop(handle.handle_id, None)
        if slot is not None:
            self._slots.give(slot)


Key = tuple[str, int]


class DecodeStateBuffers:
    """One hidden row per running request, keyed by (request_id, generation)."""

    def __init__(
        self, max_num_seqs: int, hidden_size: int, device: torch.device | str, dtype: torch.dtype
    ) -> None:
        self.hidden = torch.zeros(max_num_seqs, hidden_size, device=device, dtype=dtype)
        self._slots = _Slots(max_num_seqs, "decode-state pool")
        self._by_key: dict[Key, int] = {}

    @property
    def num_in_use(self) -> int:
        return len(self._by_key)

    def holds(self, key: Key) -> bool:
        return key in self._by_key

    def slot(self, key: Key) -> int:
        slot = self._by_key.get(key)
        if slot is None:
            raise RuntimeError(f"request {key} has no decode state (prompt not finished?)")
        return slot

    def slot_or_new(self, key: Key) -> int:
        slot = self._by_key.get(key)
        if slot is None:
            slot = self._by_key[key] = self._slots.take()
        return slot

    def release(self, key: Key) -> None:
        slot = self._by_key.pop(key, None)
        if slot is not None:
            self._slots.give(slot)
