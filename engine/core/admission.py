"""The waiting queue and admission (FCFS or priority, bounded scan, bypass limit)."""

from __future__ import annotations

import bisect
from collections.abc import Callable

from engine.core.config import SchedulerConfig
from engine.core.request import Request


class WaitingQueue:
    """Requests not yet admitted, in admission-priority order.

    FCFS orders by arrival; ``priority`` by (priority, arrival), lower value first.
    """

    def __init__(self, cfg: SchedulerConfig) -> None:
        self.cfg = cfg
        self._queue: list[Request] = []

    def _key(self, r: Request) -> tuple[int, int]:
        if self.cfg.policy == "priority":
            return (r.priority, r.arrival_seq)
        return (0, r.arrival_seq)

    def push(self, req: Request) -> None:
        bisect.insort(self._queue, req, key=self._key)

    def remove(self, req: Request) -> bool:
        try:
            self._queue.remove(req)
        except ValueError:
            return False
        return True

    def __len__(self) -> int:
        return len(self._queue)

    def __bool__(self) -> bool:
        return bool(self._queue)

    def admit(self, num_free_slots: int, try_admit: Callable[[Request], bool]) -> list[Request]:
        """Admit in order while slots last, scanning at most ``admission_scan_limit`` requests.

        When a request does not fit, later ones may bypass it, at most
        ``max_admission_bypasses`` times in its lifetime; then it is protected and admission
        waits for it. ``try_admit`` claims capacity or returns False.
        """
        admitted: list[Request] = []
        if num_free_slots <= 0 or not self._queue:
            return admitted
        blocked: Request | None = None  # the oldest request that did not fit
        for req in self._queue[: self.cfg.admission_scan_limit]:
            if len(admitted) >= num_free_slots:
                break
            if blocked is not None and blocked.bypassed >= self.cfg.max_admission_bypasses:
                break
            if try_admit(req):
                admitted.append(req)
                if blocked is not None:
                    blocked.bypassed += 1
            elif blocked is None:
                blocked = req
        for req in admitted:
            self._queue.remove(req)
        return admitted
