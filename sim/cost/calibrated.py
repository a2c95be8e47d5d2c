"""Calibrated cost: per-stage linear models fitted on measured steps of the real runner.

Profile file format ``loopserve-profile/1`` (JSON, stored as
``results/profiles/<hardware>-<model>.json``)::

    {
      "format": "loopserve-profile/1",
      "hardware": "h200",                 # the hardware name scenarios ask for
      "model": "ouro-1.4b",               # the model preset (or checkpoint) name
      "provenance": {"device": "NVIDIA H200", "torch_version": "2.13.0",
                     "dtype": "bfloat16", "commit": "<git sha>", "date": "2026-01-01",
                     "held_out_mape": 0.04},
      "stages": {
        "decode":  {"features": ["rows", "context_sum"], "coef": [1.2e-6, 3e-10],
                    "intercept_s": 6.1e-4},
        "prompt":  {...}, "mixed": {...}, "prefill": {...}, "prelude": {...}, "coda": {...}
      }
    }

A step's time is ``intercept_s + sum(coef[i] * feature[features[i]])`` for the stage kind of
the batch (``Batch.kind_label``: decode | prompt | mixed | prefill | prelude | coda), clamped
at 0. Feature names and definitions are those of ``sim.cost.features``. A profile may omit
stage kinds it was not measured on; predicting one of those is an error (mixed batches are
measured, never extrapolated from prompt-only data). Fitting lives in the calibration code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from engine.core.batch import Batch
from sim.cost.features import FEATURE_NAMES, STAGE_KINDS, batch_features

PROFILE_FORMAT = "loopserve-profile/1"
StageKind = Literal["decode", "prompt", "mixed", "prefill", "prelude", "coda"]


class Provenance(BaseModel):
    """Where and how a profile was measured."""

    model_config = ConfigDict(extra="forbid")

    device: str
    torch_version: str
    dtype: str
    commit: str
    date: str
    held_out_mape: float | None = None


class StageFit(BaseModel):
    """One stage kind's linear model."""

    model_config = ConfigDict(extra="forbid")

    features: list[str]
    coef: list[float]
    intercept_s: float

    @field_validator("features")
    @classmethod
    def _known_features(cls, v: list[str]) -> list[str]:
        unknown = [f for f in v if f not in FEATURE_NAMES]
        if unknown:
            raise ValueError(f"unknown features {unknown}; known: {', '.join(FEATURE_NAMES)}")
        return v

    @model_validator(mode="after")
    def _same_length(self) -> StageFit:
        if len(self.coef) != len(self.features):
            raise ValueError(
                f"{len(self.coef)} coefficients for {len(self.features)} features"
            )
        return self


class Profile(BaseModel):
    """A calibrated profile (format ``loopserve-profile/1``)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["loopserve-profile/1"]
    hardware: str
    model: str
    provenance: Provenance
    stages: dict[StageKind, StageFit]

    @field_validator("stages")
    @classmethod
    def _some_stage(cls, v: dict[str, StageFit]) -> dict[str, StageFit]:
        if not v:
            raise ValueError(f"needs at least one of {', '.join(STAGE_KINDS)}")
        return v


def _one_line(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "<root>"
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{loc}: {first['msg']}{more}"


def load_profile(source: str | Path | dict[str, Any] | Profile) -> Profile:
    """Read and validate a profile; ValueError with a one-line reason if it is unusable."""
    if isinstance(source, Profile):
        return source
    where = "cost.profile"
    if isinstance(source, dict):
        data: Any = source
    else:
        where = f"cost.profile: {source}"
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"{where}: cannot read the file ({exc.strerror or exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                "the file is corrupt or truncated, re-run calibration"
            ) from None
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{where}: format is {found!r}, expected {PROFILE_FORMAT!r}")
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{where}: invalid profile: {_one_line(exc)}") from None


def save_profile(profile: Profile, path: str | Path) -> None:
    """Write ``profile`` as indented JSON (stable key order)."""
    Path(path).write_text(profile.model_dump_json(indent=2) + "\n", encoding="utf-8")


class CalibratedCost:
    """Predicts step times from a profile's per-stage linear models."""

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
        self._fits: dict[str, tuple[tuple[str, ...], tuple[float, ...], float]] = {
            k: (tuple(v.features), tuple(v.coef), v.intercept_s) for k, v in p.stages.items()
        }

    def _fit(self, batch: Batch) -> tuple[tuple[str, ...], tuple[float, ...], float]:
        kind = batch.kind_label
        fit = self._fits.get(kind)
        if fit is None:
            raise ValueError(
                f"cost.profile: the profile ({self.profile.hardware}, {self.profile.model}) has "
                f"no {kind!r} stage; recalibrate including {kind} steps"
            )
        return fit

    def step_time(self, batch: Batch) -> float:
        names, coef, intercept = self._fit(batch)
        f = batch_features(batch)
        return max(0.0, intercept + sum(c * f[n] for n, c in zip(names, coef, strict=True)))

    def breakdown(self, batch: Batch) -> dict[str, float]:
        names, coef, intercept = self._fit(batch)
        f = batch_features(batch)
        out = {"intercept_s": intercept}
        for n, c in zip(names, coef, strict=True):
            out[f"{n}_s"] = c * f[n]
        out["total_s"] = self.step_time(batch)
        return out
