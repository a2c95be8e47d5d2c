"""Constant cost: every core call costs the same (for checks against queueing theory)."""

from __future__ import annotations

from engine.core.batch import Batch
from sim.cost.base import StepContext


class ConstantCost:
    """Each core call costs ``core_call_s``; a PRELUDE or CODA step counts as one call.

    An atomic PREFILL step over a chunk costs D calls (``Batch.num_core_calls``), a RECURRENT
    step one call.
    """

    def __init__(self, core_call_s: float) -> None:
        if not core_call_s > 0:
            raise ValueError(f"cost.core_call_s: must be > 0 seconds, got {core_call_s!r}")
        self.core_call_s = float(core_call_s)

    def calls(self, batch: Batch) -> int:
        """Calls the step is charged for."""
        return batch.num_core_calls or 1

    def step_time(self, ctx: StepContext) -> float:
        return self.calls(ctx.batch) * self.core_call_s

    def breakdown(self, batch: Batch) -> dict[str, float]:
        total = self.calls(batch) * self.core_call_s
        return {"core_call_s": self.core_call_s, "calls": float(self.calls(batch)),
                "total_s": total}
