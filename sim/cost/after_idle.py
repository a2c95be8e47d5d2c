"""The first step after the engine sat idle runs slower: ``AfterIdle``, a profile part.

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
"""

from __future__ import annotations

import math
import statistics

from pydantic import BaseModel, ConfigDict, model_validator

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
