"""The calibrated cost model's profile: per-stage linear models fitted on measured steps of
the real runner (``sim.cost.calibrated.CalibratedCost`` predicts with them).

File format ``loopserve-profile/1`` (JSON, stored as
``results/profiles/<hardware>-<model>.json``)::

    {
      "format": "loopserve-profile/1",
      "hardware": "h200",                 # the hardware name scenarios ask for
      "model": "ouro-1.4b",               # the model preset (or checkpoint) name
      "provenance": {"device": "NVIDIA H200", "torch_version": "2.13.0",
                     "dtype": "bfloat16", "commit": "<git sha>", "date": "<ISO date>",
                     "held_out_mape": 0.04},
      "stages": {
        "decode":  {"features": ["rows", "context_sum"], "coef": [1.2e-6, 3e-10],
                    "intercept_s": 6.1e-4},
        "prompt":  {...}, "mixed": {...}, "prefill": {...}, "prelude": {...}, "coda": {...}
      }
    }

A step's execution time is ``intercept_s + sum(coef[i] * feature[features[i]])`` for the
stage kind of the batch (``engine.core.results.step_kind``: decode | prompt | mixed | prefill |
prelude | coda), clamped at 0. Feature names and definitions are those of ``sim.cost.features``. A
profile may omit stage kinds it was not measured on; predicting one of those is an error
(mixed batches are measured, never extrapolated from prompt-only data). Fitting lives in
``sim.cost.fit``; measuring in ``loopserve.calibrate``.

Optional parts (absent in older files, which keep loading):

- a stage's ``grid``: ``{"feature": "decode_padded_context", "points": [...],
  "values_s": [...]}``, a measured piecewise-linear term added where a linear term in that
  feature misses (interpolated between points, extended with the end segments' slopes);
- ``step_gap``: a linear model (same fields as a stage) of the host time between two steps
  of the real engine (applying the last result, scheduling this batch), added to every step
  so simulated time advances like the real loop's wall clock; ``execute_time`` leaves it out;
- provenance extras: threads, block size, backend, per-stage held-out errors, shape counts;
- ``signals`` and ``finalize``: linear models (same fields as a stage) of two costs only
  adaptive exits incur, added to a step's execute time when it has them: computing and reading
  back the exit signal of ``signal_rows`` decode rows, and copying ``finalize_copies`` exited
  tokens' KV into deeper planes (the housekeeping the next step applies first). Calibration
  measures each as the paired difference of one batch timed with and without it;
- a ``decode_after_prompt`` stage: decode-only core calls measured right after a prompt step
  instead of after a like call. The model uses it for a decode step whose previous step was
  prompt, prefill or mixed work (a ``StepContext``'s ``prev``): that work evicts the decode
  rows' KV and weights from the caches, which costs most on a CPU at long contexts;
- ``readback``: ``{"readback_s": ...}``, what one exit-signal readback adds to a recurrent
  step (``scheduler.readback_skip`` off against on: the gate, the device-to-host copy, the
  host's wait and the lost overlap; ``loopserve.calibrate.readback``). A profile with it
  charges it once per readback (one per recurrent step that reads signals back, as the
  roofline charges its ``readback_s``) in place of the ``signals`` model. Fallback for a
  profile without it: the ``signals`` model (gate plus one readback, timed alone) charges
  those steps, and ``CalibratedCost.readback_note`` says so;
- ``after_idle`` (``sim.cost.after_idle.AfterIdle``): the extra execute time of the first steps
  after the engine sat idle, by step kind and idle time, charged by
  ``sim.cost.after_idle.AfterIdleCost`` from a ``StepContext``'s ``idle_s`` and
  ``since_idle`` (counted by ``sim.cost.base.Waits``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sim.cost.after_idle import AfterIdle
from sim.cost.features import FEATURE_NAMES, STEP_KINDS
from sim.cost.linear_fit import pwl_value
from sim.profile_file import read_versioned

PROFILE_FORMAT = "loopserve-profile/1"
StageKind = Literal["decode", "prompt", "mixed", "prefill", "prelude", "coda",
                    "decode_after_prompt"]


class Provenance(BaseModel):
    """Where and how a profile was measured."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    device: str
    torch_version: str
    dtype: str
    commit: str
    date: str
    held_out_mape: float | None = None
    held_out_max_error: float | None = None
    held_out_mape_by_stage: dict[str, float] | None = None
    num_threads: int | None = None
    block_size: int | None = None
    attention_backend: str | None = None
    num_fit_shapes: int | None = None
    num_held_out_shapes: int | None = None
    repeats: int | None = None
    contended_fraction: float | None = None
    probe_s: dict[str, float] | None = None  # reference steps (loopserve.calibrate.measure)
    allocator: str | None = None  # host allocator settings (engine.host_allocator)
    seconds: float | None = None
    command: list[str] | None = None


class GridTerm(BaseModel):
    """A measured piecewise-linear term in one feature, for where a linear term misses (a
    cache cliff, a kernel switching tiles): the values at ``points`` are interpolated
    linearly and extended past the last point with the last segment's slope."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    feature: str
    points: list[float]
    values_s: list[float]

    @field_validator("feature")
    @classmethod
    def _known_feature(cls, v: str) -> str:
        if v not in FEATURE_NAMES:
            raise ValueError(f"unknown feature {v!r}; known: {', '.join(FEATURE_NAMES)}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> GridTerm:
        if len(self.points) < 2 or len(self.points) != len(self.values_s):
            raise ValueError(
                f"{len(self.points)} grid points for {len(self.values_s)} values (need >= 2 "
                "of each, as many points as values)"
            )
        if any(b <= a for a, b in zip(self.points, self.points[1:], strict=False)):
            raise ValueError("grid points must be strictly increasing")
        return self

    def value(self, x: float) -> float:
        """The term at ``x`` in seconds."""
        return pwl_value(self.points, self.values_s, x)


class StageFit(BaseModel):
    """One stage kind's linear model."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    features: list[str]
    coef: list[float]
    intercept_s: float
    grid: GridTerm | None = None
    # A second piecewise-linear term in the decode rows, beside a context grid: on a CPU one
    # decode row runs matrix-vector kernels and two or more run matrix-matrix ones, so time
    # jumps from 1 to 2 rows and then grows slowly, which no linear row term follows.
    rows_grid: GridTerm | None = None

    @field_validator("features")
    @classmethod
    def _known_features(cls, v: list[str]) -> list[str]:
        unknown = [f for f in v if f not in FEATURE_NAMES]
        if unknown:
            raise ValueError(f"unknown features {unknown}; known: {', '.join(FEATURE_NAMES)}")
        return v

    @field_validator("coef")
    @classmethod
    def _non_negative(cls, v: list[float]) -> list[float]:
        # the fit drops a feature whose coefficient comes out negative (sim.cost.fit): time
        # never falls as work grows
        bad = next((c for c in v if c < 0), None)
        if bad is not None:
            raise ValueError(f"coefficient {bad} is negative; re-run calibration")
        return v

    @model_validator(mode="after")
    def _same_length(self) -> StageFit:
        if len(self.coef) != len(self.features):
            raise ValueError(
                f"{len(self.coef)} coefficients for {len(self.features)} features"
            )
        if self.rows_grid is not None and self.rows_grid.feature != "decode_rows":
            raise ValueError(f"rows_grid: must be over decode_rows, not "
                             f"{self.rows_grid.feature!r}")
        return self

    @property
    def grids(self) -> list[GridTerm]:
        """The fit's piecewise-linear terms (the context grid, then the rows grid)."""
        return [g for g in (self.grid, self.rows_grid) if g is not None]

    def predict(self, f: dict[str, float]) -> float:
        """Seconds for feature vector ``f`` (clamped at 0)."""
        t = self.intercept_s + sum(c * f[n] for n, c in zip(self.features, self.coef, strict=True))
        t += sum(g.value(f[g.feature]) for g in self.grids)
        return max(0.0, t)


class ReadbackTerm(BaseModel):
    """The measured per-readback extra of a recurrent step (seconds, >= 0)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    readback_s: float = Field(ge=0.0, description="seconds one exit-signal readback adds to "
                              "a recurrent step; re-run calibration if negative")
    rows: list[int] | None = None  # decode rows of the measured batches
    per_rows_s: list[float] | None = None  # each batch's median difference, same order


class Profile(BaseModel):
    """A calibrated profile (format ``loopserve-profile/1``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    format: Literal["loopserve-profile/1"]
    hardware: str
    model: str
    provenance: Provenance
    stages: dict[StageKind, StageFit]
    step_gap: StageFit | None = None
    signals: StageFit | None = None
    finalize: StageFit | None = None
    after_idle: AfterIdle | None = None
    readback: ReadbackTerm | None = None

    @field_validator("stages")
    @classmethod
    def _some_stage(cls, v: dict[str, StageFit]) -> dict[str, StageFit]:
        if not v:
            raise ValueError(f"needs at least one of {', '.join(STEP_KINDS)}")
        return v


def load_profile(source: str | Path | dict[str, Any] | Profile) -> Profile:
    """Read and validate a profile; ValueError with a one-line reason if it is unusable."""
    if isinstance(source, Profile):
        return source
    return read_versioned(source, Profile, fmt=PROFILE_FORMAT, where="cost.profile",
                          what="profile", fix="re-run calibration")


def profile_json(profile: Profile) -> str:
    """The profile file's text: indented JSON, stable key order, unset optional parts left
    out (the one writer ``save_profile`` and ``loopserve calibrate`` share)."""
    return profile.model_dump_json(indent=2, exclude_none=True) + "\n"


def save_profile(profile: Profile, path: str | Path) -> None:
    """Write ``profile`` to ``path``."""
    Path(path).write_text(profile_json(profile), encoding="utf-8")
