"""What one calibration produced (``loopserve.calibrate.job``): the profile and everything
behind it. No torch, so the command that writes it can name the type at import."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.cost.after_idle import AfterIdle
from sim.cost.fit import Sample, StageResult
from sim.cost.profile import Profile


@dataclass
class IdleMeasurement:
    """``loopserve.calibrate.after_idle``'s result: the fitted term and, per shape, its time
    over its warm time after each wait (for the calibration's table)."""

    after_idle: AfterIdle
    ratios: dict[str, list[float]]  # per shape, one per pause in after_idle.idle_s


@dataclass
class CalibrationResult:
    """The profile plus everything behind it, for reports and the steps CSV."""

    profile: Profile
    stages: dict[str, StageResult]
    gap: StageResult | None
    samples: list[Sample] = field(default_factory=list)
    gap_samples: list[Sample] = field(default_factory=list)
    in_situ: list[Sample] = field(default_factory=list)
    seconds: float = 0.0
    extras: list[Sample] = field(default_factory=list)  # adaptive-exit paired differences
    extra_fits: dict[str, StageResult] = field(default_factory=dict)
    idle: IdleMeasurement | None = None

    def predict(self, sample: Sample) -> float | None:
        """The profile's prediction for a sample (None for a kind it has no model of)."""
        if sample.kind in ("step_gap", "signals", "finalize"):
            fit = getattr(self.profile, sample.kind)
        else:
            fit = self.profile.stages.get(sample.kind)  # type: ignore[call-overload]
        return None if fit is None else fit.predict(sample.features)
