"""Per arm, the simulated run's metrics against the measured runs' at the reference point:
the ``arms`` rows of fidelity.json (``compare``) and of the run at the measured runs' own speed
(``machine``)."""

from __future__ import annotations

import numpy as np

from loopserve.fidelity.json_types import ArmErrors, MetricError
from loopserve.fidelity.world import WorldRun
from loopserve.plan import Plan
from loopserve.stats.metrics import metric

METRICS: dict[str, tuple[str, str | None]] = {
    "itl_p50_ms": ("itl_ms", "p50"),
    "itl_p99_ms": ("itl_ms", "p99"),
    "ttft_p50_ms": ("ttft_ms", "p50"),
    "ttft_p99_ms": ("ttft_ms", "p99"),
    "tpot_mean_ms": ("tpot_ms", "mean"),
    "output_tok_s": ("output_tok_s", None),
}


def median(values: list[float | None]) -> float | None:
    """The median of the values that are not None (None without any)."""
    vals = [v for v in values if v is not None]
    return float(np.median(vals)) if vals else None


def at_reference(plan: Plan, runs: list[WorldRun], arm: str) -> list[WorldRun]:
    """The runs of ``arm`` at the plan's reference point."""
    return [r for r in runs if r.spec.arm == arm and r.spec.point_id == plan.reference_point_id]


def metric_row(sim: list[WorldRun], measured: dict[str, float | None]) -> ArmErrors:
    """Per metric: the sim's median over ``sim`` against ``measured``, and the error."""
    row: ArmErrors = {}
    for name, (key, sub) in METRICS.items():
        s = median([metric(r.metrics, key, sub) for r in sim])
        m = measured[name]
        rel = (s - m) / m if s is not None and m is not None and m != 0 else None
        row[name] = MetricError(sim=s, measured=m, rel_error=rel)
    return row


def arm_errors(plan: Plan, sim: list[WorldRun], real: list[WorldRun]) -> dict[str, ArmErrors]:
    """Per arm at the reference point: each metric's sim median against the measured median."""
    return errors_against(plan, sim, {arm: {
        name: median([metric(r.metrics, key, sub) for r in at_reference(plan, real, arm)])
        for name, (key, sub) in METRICS.items()} for arm in plan.scenario.arms})


def errors_against(plan: Plan, sim: list[WorldRun],
                   measured: dict[str, dict[str, float | None]]) -> dict[str, ArmErrors]:
    """Per arm at the reference point: each metric's sim median against ``measured[arm]``
    (a fidelity.json's measured medians, say)."""
    return {arm: metric_row(at_reference(plan, sim, arm), measured[arm])
            for arm in plan.scenario.arms}
