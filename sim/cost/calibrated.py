"""Calibrated cost: step times predicted by a profile's per-stage linear models
(``sim.cost.profile``: the file format), for the stage kind of each batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.core.batch import Batch
from engine.core.request import Stage
from engine.core.results import rfc_readbacks, step_kind
from sim.cost.base import StepContext
from sim.cost.features import FEATURE_INDEX, batch_features, feature_values
from sim.cost.linear_fit import LinearFit
from sim.cost.profile import Profile, StageFit, load_profile

# A decode-only core call right after one of these runs with caches the prompt work evicted.
COLD_AFTER = ("prompt", "prefill", "mixed")


def stage_kind(batch: Batch, prev: Batch | None = None) -> str:
    """The profile stage that prices ``batch`` run after ``prev``: its ``step_kind``, or
    ``decode_after_prompt`` for a decode call right after prompt work."""
    kind = step_kind(batch)
    if kind == "decode" and prev is not None and step_kind(prev) in COLD_AFTER:
        return "decode_after_prompt"
    return kind


def _recurrent_readbacks(batch: Batch) -> int:
    """Exit-signal readbacks of a recurrent step (a CODA step's own readback is part of the
    coda stage's measured time)."""
    return 0 if batch.stage is Stage.CODA else rfc_readbacks(batch)


def _linear(fit: StageFit) -> LinearFit:
    return LinearFit(fit.features, fit.coef, fit.intercept_s,
                     [(g.feature, g.points, g.values_s) for g in fit.grids])


class CalibratedCost:
    """Predicts step times from a profile's per-stage linear models.

    ``step_time`` = ``execute_time`` (the runner's ``execute``) + the host gap between steps
    (when the profile has ``step_gap``). ``execute_time`` is the model of the stage that
    prices the step after ``ctx.prev`` plus, for a step that has them and a profile that
    measured them, the adaptive-exit extras (``signals``, ``finalize``). The idle time before
    a step is no concern of this model: the profile's ``after_idle`` term is its own module
    (``sim.cost.after_idle.AfterIdleCost``), composed onto this one by
    ``sim.cost.resolve.compose``.

    A profile with a ``readback`` term charges a recurrent step that reads exit signals back
    its ``readback_s`` once per readback (``rfc_readbacks``, as the roofline does) instead of
    the ``signals`` model; without one the ``signals`` model charges it (``readback_note``).
    """

    def __init__(
        self,
        profile: str | Path | dict[str, Any] | Profile,
        *,
        hardware: str | None = None,
        model: str | None = None,
    ) -> None:
        self.profile = load_profile(profile)
        p = self.profile
        if hardware is not None and p.hardware != hardware:
            raise ValueError(
                f"cost.profile: the profile was measured on hardware {p.hardware!r} but the "
                f"scenario asks for {hardware!r}; use a {hardware} profile or set hardware: "
                f"{p.hardware}"
            )
        if model is not None and p.model != model:
            raise ValueError(
                f"cost.profile: the profile was measured for model {p.model!r} but the scenario "
                f"uses {model!r}; use a {model} profile or set model: {p.model}"
            )
        self._fits: dict[str, StageFit] = {str(k): v for k, v in p.stages.items()}
        self._gap = p.step_gap
        self.readback_s = None if p.readback is None else p.readback.readback_s
        self.readback_note = None if p.readback is not None else (
            "cost.profile: no readback term (an older profile); a readback is charged by the "
            "signals model (gate plus one readback); re-run loopserve calibrate to measure it")
        signals = p.signals if self.readback_s is None else None
        # (name, the feature that makes a step incur it, its model)
        self._extras = [(name, feature, fit) for name, feature, fit in (
            ("signals", "signal_rows", signals), ("finalize", "finalize_copies", p.finalize))
            if fit is not None]
        # The per-step path (split, step_time) predicts from the features' list.
        self._linear = {kind: _linear(fit) for kind, fit in self._fits.items()}
        self._linear_extras = [(FEATURE_INDEX[feature], _linear(fit))
                               for _, feature, fit in self._extras]
        self._linear_gap = None if self._gap is None else _linear(self._gap)

    def _fit(self, batch: Batch, prev: Batch | None = None) -> tuple[str, StageFit]:
        kind = stage_kind(batch, prev)
        if kind == "decode_after_prompt" and kind not in self._fits:
            kind = "decode"  # a profile without the stage
        fit = self._fits.get(kind)
        if fit is None:
            raise ValueError(
                f"cost.profile: the profile ({self.profile.hardware}, {self.profile.model}) has "
                f"no {kind!r} stage; recalibrate including {kind} steps"
            )
        return kind, fit

    def _execute_s(self, fit: StageFit, batch: Batch, f: dict[str, float]) -> float:
        t = fit.predict(f)
        for _, feature, extra in self._extras:
            if f[feature] > 0:
                t += extra.predict(f)
        if self.readback_s is not None:
            t += self.readback_s * _recurrent_readbacks(batch)
        return t

    def split(self, ctx: StepContext) -> tuple[str, float, float]:
        """``(kind, execute_s, gap_s)``: the profile stage that prices ``ctx.batch`` after
        ``ctx.prev``, the predicted seconds of the runner's ``execute`` and the host gap
        (``_execute_s`` and ``_gap_s`` on the features' list)."""
        batch = ctx.batch
        kind = self._fit(batch, ctx.prev)[0]
        v = feature_values(batch)
        t = self._linear[kind].predict(v)
        for i, extra in self._linear_extras:
            if v[i] > 0:
                t += extra.predict(v)
        if self.readback_s is not None:
            t += self.readback_s * _recurrent_readbacks(batch)
        gap = self._linear_gap
        return kind, t, 0.0 if gap is None else gap.predict(v)

    def execute_time(self, ctx: StepContext) -> float:
        """Predicted seconds of the runner's ``execute(ctx.batch)`` alone, after ``ctx.prev``."""
        fit = self._fit(ctx.batch, ctx.prev)[1]
        return self._execute_s(fit, ctx.batch, batch_features(ctx.batch))

    def _gap_s(self, features: dict[str, float]) -> float:
        return 0.0 if self._gap is None else self._gap.predict(features)

    def gap_time(self, batch: Batch) -> float:
        """Predicted host seconds between the previous step's end and this step's start."""
        return self._gap_s(batch_features(batch))

    def step_time(self, ctx: StepContext) -> float:
        _, execute_s, gap_s = self.split(ctx)
        return execute_s + gap_s

    def breakdown(self, batch: Batch) -> dict[str, float]:
        fit = self._fit(batch)[1]
        f = batch_features(batch)
        out = {"intercept_s": fit.intercept_s}
        for n, c in zip(fit.features, fit.coef, strict=True):
            out[f"{n}_s"] = c * f[n]
        for g in fit.grids:
            out[f"{g.feature}_grid_s"] = g.value(f[g.feature])
        for name, feature, extra in self._extras:
            if f[feature] > 0:
                out[f"{name}_s"] = extra.predict(f)
        if self.readback_s is not None:
            out["readback_s"] = self.readback_s * _recurrent_readbacks(batch)
        out["host_s"] = self.gap_time(batch)
        out["total_s"] = self.step_time(StepContext(batch))
        return out
