"""The executor interface both worlds implement (docs/design.md)."""

from __future__ import annotations

from typing import Protocol

from engine.core.batch import Batch
from engine.core.results import StepResult


class Executor(Protocol):
    """Runs one scheduled batch and returns its typed result.

    Implementations: ``engine.runner.ModelRunner`` (torch, CPU or CUDA) and
    ``engine.core.seeded_executor.SeededExecutor`` (seeded tokens and signals: the tests'
    executor, and the simulator's, where time comes from a cost model).

    Contract: apply ``batch.housekeeping`` (finalize copies, released prompt states and
    requests) before the items; return ``RecurrentResult`` for RECURRENT (one signal per DECODE
    item in item order when any needs one, else None), ``CodaResult`` for CODA (one token per
    item), a plain ``StepResult`` for PRELUDE and PREFILL; read back only decode rows. Raise on
    failure; the driver then calls ``EngineCore.fail(batch)``, which hands the housekeeping
    over again with the next batch (so applying it must be idempotent). Items whose request
    is gone or reused (aborted after ``schedule``) must not run; any value stands in for them.
    """

    def execute(self, batch: Batch) -> StepResult:
        """Run ``batch`` and return its result."""
