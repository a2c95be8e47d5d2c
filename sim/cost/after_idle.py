"""The first step after the engine sat idle runs slower: ``AfterIdle``, the profile part
that holds the measured factors, and ``AfterIdleCost``, the cost model that charges them on
top of any base model.

A step run after a wait takes longer than the same step back to back, whether the wait is
spent asleep or spinning: the caches lose the weights and KV while the engine waits (on a
shared machine, to its neighbours). An open-loop workload at low load meets that on nearly
every arrival: each request that finds the engine idle pays it on its first prompt step,
which is most of its TTFT. The measured factors are in docs/fidelity.md ("Measured").

The profile stores, per step kind and idle time, the extra fraction of the step's execute
time. An engine idles only when it has no work, so the step after a wait holds only new
requests' prompt work: a ``prefill`` (atomic) or ``prompt`` step, which differ.
``loopserve.calibrate.after_idle`` measures both and a decode step; another kind takes the
median of the measured ones. The caches refill over more than one step, so ``later[k]``
charges step k + 1 after the wait that fraction of the first step's extra.

This module is the one place that knows about idle time: the step clock counts waits
(``sim.cost.base.Waits``) into each ``StepContext``, ``sim.cost.resolve.compose`` wraps a
base cost model in ``AfterIdleCost`` when its profile carries the term, and the base models
price a batch as if it ran back to back.
"""

from __future__ import annotations

import math
import statistics

from pydantic import BaseModel, ConfigDict, model_validator

from engine.core.batch import Batch
from engine.core.results import step_kind
from sim.cost.base import CostModel, StepContext
from sim.cost.features import STEP_KINDS


class AfterIdle(BaseModel):
    """Extra execute time of a step that starts ``idle_s`` after the previous step ended, as a
    fraction of that step's time: for its step kind, ``extra[kind][i]`` at ``idle_s[i]``,
    interpolated linearly in log idle time between points, held past the last point, and
    going linearly to 0 at no idle time below the first. The ``since`` + 1-th step after the
    wait (back to back after the first) pays ``later[since - 1]`` of that extra, and none
    past the end of ``later``."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    idle_s: list[float]
    extra: dict[str, list[float]]
    later: list[float] = []

    @model_validator(mode="after")
    def _consistent(self) -> AfterIdle:
        if not self.idle_s or not self.extra:
            raise ValueError("needs >= 1 idle time and >= 1 step kind's extras")
        if self.idle_s[0] <= 0 or any(b <= a for a, b in zip(self.idle_s, self.idle_s[1:],
                                                              strict=False)):
            raise ValueError("idle_s must be positive and strictly increasing")
        for kind, ext in self.extra.items():
            if kind not in STEP_KINDS:
                raise ValueError(f"extra: unknown step kind {kind!r}; known: "
                                 f"{', '.join(STEP_KINDS)}")
            if len(ext) != len(self.idle_s):
                raise ValueError(f"extra.{kind}: {len(ext)} values for {len(self.idle_s)} idle "
                                 "times (need as many of each)")
            if any(e < 0 for e in ext):
                raise ValueError(f"extra.{kind}: must be >= 0 (a wait never makes a step "
                                 "faster)")
        if any(f < 0 for f in self.later):
            raise ValueError("later: must be >= 0 (fractions of the first step's extra)")
        return self

    def _median(self) -> list[float]:
        return [statistics.median(col) for col in zip(*self.extra.values(), strict=True)]

    def factor(self, idle_s: float, kind: str, since: int = 0) -> float:
        """Execute-time multiplier of a ``kind`` step, ``since`` steps after the first one
        after ``idle_s`` seconds idle (1 for none); a kind not measured takes the measured
        kinds' median."""
        if idle_s <= 0.0 or since > len(self.later):
            return 1.0
        share = 1.0 if since == 0 else self.later[since - 1]
        return 1.0 + share * self._extra(idle_s, self.extra.get(kind) or self._median())

    def _extra(self, idle_s: float, ext: list[float]) -> float:
        pts = self.idle_s
        if idle_s <= pts[0]:
            return ext[0] * idle_s / pts[0]
        if idle_s >= pts[-1]:
            return ext[-1]
        i = 1
        while idle_s > pts[i]:
            i += 1
        w = math.log(idle_s / pts[i - 1]) / math.log(pts[i] / pts[i - 1])
        return ext[i - 1] + w * (ext[i] - ext[i - 1])


class AfterIdleCost:
    """``base`` with the execute time of the steps after a wait scaled by ``after_idle``.

    The factor applies to the execute time alone, for the step kind the base priced it as:
    with a base that splits execute from the host gap (``SplitCostModel``, the calibrated
    model) the gap is left as it is; any other base's whole step counts as execute time, of
    its ``step_kind``. A step that follows no wait costs exactly what the base says.
    """

    def __init__(self, base: CostModel, after_idle: AfterIdle) -> None:
        self.base = base
        self.after_idle = after_idle
        self._base_split = getattr(base, "split", None)  # looked up once, not per step
        self._num_later = len(after_idle.later)  # steps past it after a wait pay nothing

    def split(self, ctx: StepContext) -> tuple[str, float, float]:
        """``(kind, execute_s, gap_s)`` of ``ctx``, execute time scaled after a wait."""
        split = self._base_split
        if split is not None:
            kind, execute_s, gap_s = split(ctx)
        else:
            kind, execute_s, gap_s = step_kind(ctx.batch), self.base.step_time(ctx), 0.0
        if ctx.idle_s > 0.0 and ctx.since_idle <= self._num_later:
            execute_s *= self.after_idle.factor(ctx.idle_s, kind, ctx.since_idle)
        return kind, execute_s, gap_s

    def step_time(self, ctx: StepContext) -> float:
        _, execute_s, gap_s = self.split(ctx)
        return execute_s + gap_s

    def execute_time(self, ctx: StepContext) -> float:
        """Seconds of the runner's ``execute(ctx.batch)`` after what ``ctx`` says came
        before it."""
        return self.split(ctx)[1]

    def gap_time(self, batch: Batch) -> float:
        """The base's host gap before ``batch`` (no wait changes it)."""
        return self.split(StepContext(batch))[2]

    def breakdown(self, batch: Batch) -> dict[str, float]:
        """The base's terms: a batch alone follows no wait."""
        return self.base.breakdown(batch)
