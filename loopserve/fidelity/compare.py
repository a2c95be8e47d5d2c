"""The comparison of a fidelity run's two worlds: the ``fidelity.json`` document
(docs/fidelity.md), built from typed sections here and in ``batches``, ``drift``, ``tail`` and
``targets``, and written by ``loopserve.commands.fidelity``.

Per-step error: each measured batch is predicted with ``CalibratedCost.execute_time`` and
compared with its measured ``execute`` time, rel_error = (predicted - measured) / measured.
"""

from __future__ import annotations

import numpy as np

from loopserve.fidelity.batches import batch_comparison
from loopserve.fidelity.doc import (
    ArmErrors,
    AtRunSpeed,
    ErrorStats,
    FastestErrors,
    FidelityDoc,
    Machine,
    Makespan,
    MetricError,
)
from loopserve.fidelity.drift import drift
from loopserve.fidelity.exits import exit_fidelity
from loopserve.fidelity.tail import tail
from loopserve.fidelity.targets import targets
from loopserve.fidelity.world import RealWorld, WorldRun
from loopserve.plan import Plan
from loopserve.stats.metrics import metric
from sim.cost.calibrated import CalibratedCost
from sim.cost.fit import contended as contended_step
from sim.cost.profile import Profile

METRICS: dict[str, tuple[str, str | None]] = {
    "itl_p50_ms": ("itl_ms", "p50"),
    "itl_p99_ms": ("itl_ms", "p99"),
    "ttft_p50_ms": ("ttft_ms", "p50"),
    "ttft_p99_ms": ("ttft_ms", "p99"),
    "tpot_mean_ms": ("tpot_ms", "mean"),
    "output_tok_s": ("output_tok_s", None),
}


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


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.median(vals)) if vals else None


def _at_ref(plan: Plan, runs: list[WorldRun], arm: str) -> list[WorldRun]:
    return [r for r in runs if r.spec.arm == arm and r.spec.point_id == plan.reference_point_id]


def _row(sim: list[WorldRun], measured: dict[str, float | None]) -> ArmErrors:
    """Per metric: the sim's median over ``sim`` against ``measured``, and the error."""
    row: ArmErrors = {}
    for name, (key, sub) in METRICS.items():
        s = _median([metric(r.metrics, key, sub) for r in sim])
        m = measured[name]
        rel = (s - m) / m if s is not None and m is not None and m != 0 else None
        row[name] = MetricError(sim=s, measured=m, rel_error=rel)
    return row


def arm_errors(plan: Plan, sim: list[WorldRun], real: list[WorldRun]) -> dict[str, ArmErrors]:
    """Per arm at the reference point: each metric's sim median against the measured median."""
    return errors_against(plan, sim, {arm: {
        name: _median([metric(r.metrics, key, sub) for r in _at_ref(plan, real, arm)])
        for name, (key, sub) in METRICS.items()} for arm in plan.scenario.arms})


def errors_against(plan: Plan, sim: list[WorldRun],
                   measured: dict[str, dict[str, float | None]]) -> dict[str, ArmErrors]:
    """Per arm at the reference point: each metric's sim median against ``measured[arm]``
    (a fidelity.json's measured medians, say)."""
    return {arm: _row(_at_ref(plan, sim, arm), measured[arm]) for arm in plan.scenario.arms}


def _vs_fastest(plan: Plan, sim: list[WorldRun],
                real: list[WorldRun]) -> dict[str, FastestErrors] | None:
    """Per arm, the sim against the measured repeat with the shortest makespan (None with one
    repeat). A shared machine's neighbours only ever add time, so the fastest of several
    interleaved repeats is the best estimate of the undisturbed machine the profile measured;
    the median (``arms``) is the typical run."""
    if plan.scenario.repeats < 2:
        return None
    out: dict[str, FastestErrors] = {}
    for arm in plan.scenario.arms:
        runs = [r for r in _at_ref(plan, real, arm) if r.records.steps]
        if runs:
            best = min(runs, key=lambda r: r.records.steps[-1].end_s)
            out[arm] = {"repeat": best.spec.repeat, **_row(_at_ref(plan, sim, arm), {
                name: metric(best.metrics, key, sub) for name, (key, sub) in METRICS.items()})}
    return out


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
            vals = [v for r in _at_ref(plan, real, arm)
                    if (v := metric(r.metrics, key, sub)) is not None]
            mid = float(np.median(vals)) if vals else 0.0
            row[name] = (max(vals) - min(vals)) / mid if len(vals) > 1 and mid else None
        out[arm] = row
    return out


def _machine(world: RealWorld, profile: Profile) -> Machine:
    """Probe times now vs at calibration: > 1 means the machine runs slower than when the
    profile was measured (a shared machine's neighbours, clocks), a bias no model can see."""
    cal = profile.provenance.probe_s or {}
    now = {k: 0.5 * (world.probes_before[k] + world.probes_after[k])
           for k in world.probes_before}
    return {"probe_s_calibration": cal or None, "probe_s_before": world.probes_before,
            "probe_s_after": world.probes_after,
            "slowdown_vs_calibration": {k: now[k] / cal[k] for k in now if cal.get(k)} or None}


def _by(groups: list[str], pred: list[float], meas: list[float]) -> dict[str, ErrorStats]:
    """``_errors`` per group label, labels sorted."""
    return {k: _errors([p for p, x in zip(pred, groups, strict=True) if x == k],
                       [m for m, x in zip(meas, groups, strict=True) if x == k])
            for k in sorted(set(groups))}


def compare(plan: Plan, sim: list[WorldRun], world: RealWorld, cost: CalibratedCost,
            profile: Profile, allocator: str | None,
            at_speed: AtRunSpeed | None = None) -> FidelityDoc:
    """The fidelity.json document; ``allocator`` is what the measured runs' allocator was set
    to (beside the calibration's own); ``at_speed`` the ``loopserve.fidelity.speed`` section
    (None: not run)."""
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
        "sim_s": _median([r.records.steps[-1].end_s if r.records.steps else None for r in sim]),
        "measured_s": _median([r.records.steps[-1].end_s if r.records.steps else None
                               for r in real]),
    }
    arms = arm_errors(plan, sim, real)
    fastest = _vs_fastest(plan, sim, real)
    batches = batch_comparison(plan, sim, real)
    drift_section = drift(real, cost)
    machine = _machine(world, profile)
    prov = profile.provenance
    return {
        "step_mape": total["mape"],
        "step_max_error": total["max_error"],
        "arms": arms,
        "exits": exit_fidelity(plan, sim, real),
        "vs_fastest_repeat": fastest,
        "at_run_speed": at_speed,
        "targets": targets(arms, drift_section, machine, fastest),
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
        "machine": machine,
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
