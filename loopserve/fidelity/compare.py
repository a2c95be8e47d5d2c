"""The comparison of a fidelity run's two worlds: the ``fidelity.json`` document
(docs/fidelity.md), built from typed sections here and in ``arm_errors``, ``batches``,
``machine`` (the machine's own drift), ``tail`` and ``targets``, and written by
``loopserve.commands.fidelity``.

Per-step error: each measured batch is predicted with the calibrated cost model's
``execute_time`` (with the after-idle effect composed on it) and compared with its measured
``execute`` time, rel_error = (predicted - measured) / measured.
"""

from __future__ import annotations

import numpy as np

from loopserve.fidelity.arm_errors import METRICS, arm_errors, at_reference, median
from loopserve.fidelity.batches import batch_comparison
from loopserve.fidelity.exits import exit_fidelity
from loopserve.fidelity.json_types import (
    AtRunSpeed,
    ErrorStats,
    FidelityDoc,
    Makespan,
)
from loopserve.fidelity.machine import drift, machine, vs_fastest_repeat
from loopserve.fidelity.tail import tail
from loopserve.fidelity.targets import targets
from loopserve.fidelity.world import RealWorld, WorldRun
from loopserve.plan import Plan
from loopserve.stats.metrics import metric
from sim.cost.base import SplitCostModel
from sim.cost.fit import contended as contended_step
from sim.cost.profile import Profile


def _errors(pred: list[float], meas: list[float]) -> ErrorStats:
    p, m = np.asarray(pred, dtype=float), np.asarray(meas, dtype=float)
    keep = m > 0
    rel = (p[keep] - m[keep]) / m[keep]
    if rel.size == 0:
        return {"count": 0, "mape": None, "max_error": None, "median_error": None,
                "predicted_s": 0.0, "measured_s": 0.0}
    return {"count": int(rel.size), "mape": float(np.mean(np.abs(rel))),
            "max_error": float(np.max(np.abs(rel))), "median_error": float(np.median(rel)),
            "predicted_s": float(p[keep].sum()), "measured_s": float(m[keep].sum())}


def _repeat_spread(plan: Plan,
                   real: list[WorldRun]) -> dict[str, dict[str, float | None]] | None:
    """Per arm and metric, (max - min) / median of the measured repeats at the reference
    point: the run-to-run noise the sim error should be read against (None with 1 repeat)."""
    if plan.scenario.repeats < 2:
        return None
    out: dict[str, dict[str, float | None]] = {}
    for arm in plan.scenario.arms:
        row: dict[str, float | None] = {}
        for name, (key, sub) in METRICS.items():
            vals = [v for r in at_reference(plan, real, arm)
                    if (v := metric(r.metrics, key, sub)) is not None]
            mid = float(np.median(vals)) if vals else 0.0
            row[name] = (max(vals) - min(vals)) / mid if len(vals) > 1 and mid else None
        out[arm] = row
    return out


def _by(groups: list[str], pred: list[float], meas: list[float]) -> dict[str, ErrorStats]:
    """``_errors`` per group label, labels sorted."""
    return {k: _errors([p for p, x in zip(pred, groups, strict=True) if x == k],
                       [m for m, x in zip(meas, groups, strict=True) if x == k])
            for k in sorted(set(groups))}


def compare(plan: Plan, sim: list[WorldRun], world: RealWorld, cost: SplitCostModel,
            profile: Profile, allocator: str | None,
            at_speed: AtRunSpeed | None = None) -> FidelityDoc:
    """The fidelity.json document; ``allocator`` is what the measured runs' allocator was set
    to (beside the calibration's own); ``at_speed`` the ``at_run_speed`` section
    (``loopserve.fidelity.machine``; None: not run)."""
    real = world.runs
    for r in real:
        r.predict(cost)
    pred: list[float] = []
    meas: list[float] = []
    cpu: list[float] = []
    kinds: list[str] = []
    stages: list[str] = []
    gap_pred: list[float] = []
    gap_meas: list[float] = []
    for r in real:
        steps = r.records.steps
        for i, (s, b) in enumerate(zip(steps, r.batches, strict=True)):
            pred.append(r.predicted_s[i])
            meas.append(s.end_s - s.start_s)
            cpu.append(r.cpu_s[i] if i < len(r.cpu_s) else float("nan"))
            kinds.append(s.kind)
            stages.append(s.stage)
            if i > 0:
                gap_pred.append(cost.gap_time(b))
                gap_meas.append(s.start_s - steps[i - 1].end_s)
    total = _errors(pred, meas)
    contended = [contended_step(m, c) for m, c in zip(meas, cpu, strict=True) if c == c]
    wall: Makespan = {
        "sim_s": median([r.records.steps[-1].end_s if r.records.steps else None for r in sim]),
        "measured_s": median([r.records.steps[-1].end_s if r.records.steps else None
                               for r in real]),
    }
    arms = arm_errors(plan, sim, real)
    fastest = vs_fastest_repeat(plan, sim, real)
    batches = batch_comparison(plan, sim, real)
    drift_section = drift(real, cost)
    machine_section = machine(world, profile)
    prov = profile.provenance
    return {
        "step_mape": total["mape"],
        "step_max_error": total["max_error"],
        "arms": arms,
        "exits": exit_fidelity(plan, sim, real),
        "vs_fastest_repeat": fastest,
        "at_run_speed": at_speed,
        "targets": targets(arms, drift_section, machine_section, fastest),
        "measured_repeat_spread": _repeat_spread(plan, real),
        "same_batches": all(run["same"] for run in batches["runs"]),
        "step_errors": {
            "all": total,
            "by_kind": _by(kinds, pred, meas),
            "by_stage": _by(stages, pred, meas),
            "vs_cpu_time": _errors([p for p, c in zip(pred, cpu, strict=True) if c == c],
                                   [c for c in cpu if c == c]),
        },
        "host_gap": _errors(gap_pred, gap_meas),
        "contended_step_fraction": (sum(contended) / len(contended)) if contended else None,
        "makespan": wall,
        "machine": machine_section,
        "drift": drift_section,
        "tail": tail(real, cost),
        "batches": batches,
        "profile": {"hardware": profile.hardware, "model": profile.model,
                    "held_out_mape": prov.held_out_mape, "date": prov.date,
                    "device": prov.device, "num_threads": prov.num_threads},
        "target": plan.target,
        "scenario": plan.scenario.name,
        "reference_point_id": plan.reference_point_id,
        "allocator": {"measured": allocator, "calibration": prov.allocator},
    }
