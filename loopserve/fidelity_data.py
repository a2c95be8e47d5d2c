"""Both worlds of a fidelity run, and their comparison (the ``fidelity.json`` document).

The simulator runs each planned run with the calibrated cost, the batches captured as the
cost model sees them; the real target runs the same specs through ``run_realtime`` with a
``RecordingRunner`` (each executed batch, its wall and thread-CPU time). Sim and real share
configs, workload sources and seeds, so their batch sequences must agree wherever the
schedule does not depend on timing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.core.batch import Batch
from engine.core.records import RunRecords
from loopserve.fidelity_batches import batch_comparison
from loopserve.fidelity_drift import drift
from loopserve.fidelity_tail import tail
from loopserve.fidelity_targets import targets
from loopserve.report.compare import metric
from loopserve.runs.loop import each_run, sim_target
from loopserve.runs.plan import Plan, run_source
from loopserve.runs.sweep import SweepPoint
from loopserve.targets.base import RunSpec
from sim.cost.calibrated import CalibratedCost, Profile
from sim.cost.fit import contended as contended_step

METRICS: dict[str, tuple[str, str | None]] = {
    "itl_p50_ms": ("itl_ms", "p50"),
    "itl_p99_ms": ("itl_ms", "p99"),
    "ttft_p50_ms": ("ttft_ms", "p50"),
    "ttft_p99_ms": ("ttft_ms", "p99"),
    "tpot_mean_ms": ("tpot_ms", "mean"),
    "output_tok_s": ("output_tok_s", None),
}


@dataclass
class WorldRun:
    """One run in one world: records, the executed batches in order, metrics."""

    spec: RunSpec
    records: RunRecords
    batches: list[Batch]
    metrics: dict[str, Any]
    cpu_s: list[float] = field(default_factory=list)  # real world: thread CPU per execute
    predicted_s: list[float] = field(default_factory=list)  # real world: see ``predict``

    def predict(self, cost: CalibratedCost) -> list[float]:
        """The profile's execute time of each step, each priced after the step before it
        (computed once; the comparison, the drift rows, the report and steps.csv share it)."""
        if not self.predicted_s:
            self.predicted_s = [cost.execute_time(b, self.batches[i - 1] if i else None)
                                for i, b in enumerate(self.batches)]
        return self.predicted_s

    def ratios(self, cost: CalibratedCost) -> list[float]:
        """Measured / predicted execute time of each step (nan where nothing is predicted)."""
        return [(s.end_s - s.start_s) / p if p > 0 else float("nan")
                for s, p in zip(self.records.steps, self.predict(cost), strict=True)]


class _Capture:
    """A cost model that records every batch it prices (one call per simulated step)."""

    def __init__(self, cost: Any) -> None:
        self.cost = cost
        self.batches: list[Batch] = []

    def step_time(self, batch: Batch, prev: Batch | None = None) -> float:
        self.batches.append(batch)
        return float(self.cost.step_time(batch, prev))

    def breakdown(self, batch: Batch) -> dict[str, float]:
        return dict(self.cost.breakdown(batch))


def run_sim(plan: Plan, *, progress: bool = True) -> list[WorldRun]:
    """Every planned run in the simulator (calibrated cost), batches captured."""
    from loopserve.runs.metrics import summarize

    def one(point: SweepPoint, spec: RunSpec) -> WorldRun:
        capture = _Capture(plan.costs[spec.point_id])
        records = sim_target(plan).simulate(
            spec, run_source(point.scenario, spec.seed, plan.shape), capture)
        return WorldRun(spec, records, capture.batches, summarize(records, plan.shape.num_depths))

    return each_run(plan, one, progress=progress, world="sim")


@dataclass
class RealWorld:
    """The measured runs plus the reference probes timed just before and after them."""

    runs: list[WorldRun]
    probes_before: dict[str, float]
    probes_after: dict[str, float]


def run_real(plan: Plan, profile: Profile, *, progress: bool = True) -> RealWorld:
    """Every planned run on the real target (the plan's scenario carries the profile's CPU
    thread count, see ``loopserve.fidelity``); a warm-up run first when the scenario asks
    for it (discarded); the calibration probes around it."""
    return _run_real(plan, progress, profile.provenance.block_size or 16)


def _probes(target: Any, block_size: int) -> dict[str, float]:
    from loopserve.calibrate.measure import CalibrationRig, config_for, probe_shapes, time_probes

    shape = target.model.config.to_shape()
    cfg = config_for(shape, list(probe_shapes(shape.num_depths).values()), block_size)
    rig = CalibrationRig(target.runner(cfg, 0), cfg)
    return time_probes(rig)


def _run_real(plan: Plan, progress: bool, block_size: int) -> RealWorld:
    from engine.llm import run_realtime
    from loopserve.calibrate.host_gap import RecordingRunner
    from loopserve.runs.metrics import summarize
    from loopserve.targets.real import RealTarget

    target = RealTarget(plan.scenario, plan.target)
    probes: list[dict[str, float]] = []

    def one(point: SweepPoint, spec: RunSpec) -> WorldRun:
        # Batches come from the runner (signatures after the run), so the timed loop is the
        # one `loopserve run` times.
        runner = RecordingRunner(target.runner(spec.cfg, spec.seed))
        src = run_source(point.scenario, spec.seed, plan.shape)
        records = run_realtime(spec.cfg, src, runner)  # type: ignore[arg-type]
        return WorldRun(spec, records, runner.batches,
                        summarize(records, plan.shape.num_depths), runner.cpu_s)

    runs = each_run(plan, one, progress=progress,
                    after_warmup=lambda: probes.append(_probes(target, block_size)))
    return RealWorld(runs, probes[0], _probes(target, block_size))


# ---- comparison ------------------------------------------------------------------------------
def _errors(pred: list[float], meas: list[float]) -> dict[str, Any]:
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


def _row(sim: list[WorldRun], measured: dict[str, float | None]) -> dict[str, Any]:
    """Per metric: the sim's median over ``sim`` against ``measured``, and the error."""
    row: dict[str, Any] = {}
    for name, (key, sub) in METRICS.items():
        s = _median([metric(r.metrics, key, sub) for r in sim])
        m = measured[name]
        rel = (s - m) / m if s is not None and m is not None and m != 0 else None
        row[name] = {"sim": s, "measured": m, "rel_error": rel}
    return row


def _arms(plan: Plan, sim: list[WorldRun], real: list[WorldRun]) -> dict[str, Any]:
    return {arm: _row(_at_ref(plan, sim, arm), {
        name: _median([metric(r.metrics, key, sub) for r in _at_ref(plan, real, arm)])
        for name, (key, sub) in METRICS.items()}) for arm in plan.scenario.arms}


def _vs_fastest(plan: Plan, sim: list[WorldRun], real: list[WorldRun]) -> dict[str, Any] | None:
    """Per arm, the sim against the measured repeat with the shortest makespan (None with one
    repeat). A shared machine's neighbours only ever add time, so the fastest of several
    interleaved repeats is the best estimate of the undisturbed machine the profile measured;
    the median (``arms``) is the typical run."""
    if plan.scenario.repeats < 2:
        return None
    out: dict[str, Any] = {}
    for arm in plan.scenario.arms:
        runs = [r for r in _at_ref(plan, real, arm) if r.records.steps]
        if runs:
            best = min(runs, key=lambda r: r.records.steps[-1].end_s)
            out[arm] = {"repeat": best.spec.repeat, **_row(_at_ref(plan, sim, arm), {
                name: metric(best.metrics, key, sub) for name, (key, sub) in METRICS.items()})}
    return out


def _repeat_spread(plan: Plan, real: list[WorldRun]) -> dict[str, Any] | None:
    """Per arm and metric, (max - min) / median of the measured repeats at the reference
    point: the run-to-run noise the sim error should be read against (None with 1 repeat)."""
    if plan.scenario.repeats < 2:
        return None
    out: dict[str, Any] = {}
    for arm in plan.scenario.arms:
        row: dict[str, float | None] = {}
        for name, (key, sub) in METRICS.items():
            vals = [v for r in _at_ref(plan, real, arm)
                    if (v := metric(r.metrics, key, sub)) is not None]
            mid = float(np.median(vals)) if vals else 0.0
            row[name] = (max(vals) - min(vals)) / mid if len(vals) > 1 and mid else None
        out[arm] = row
    return out


def _machine(world: RealWorld, profile: Profile) -> dict[str, Any]:
    """Probe times now vs at calibration: > 1 means the machine runs slower than when the
    profile was measured (a shared machine's neighbours, clocks), a bias no model can see."""
    cal = profile.provenance.probe_s or {}
    now = {k: 0.5 * (world.probes_before[k] + world.probes_after[k])
           for k in world.probes_before}
    return {"probe_s_calibration": cal or None, "probe_s_before": world.probes_before,
            "probe_s_after": world.probes_after,
            "slowdown_vs_calibration": {k: now[k] / cal[k] for k in now if cal.get(k)} or None}


def compare(plan: Plan, sim: list[WorldRun], world: RealWorld, cost: CalibratedCost,
            profile: Profile) -> dict[str, Any]:
    """The fidelity.json document."""
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
    wall = {
        "sim_s": _median([r.records.steps[-1].end_s if r.records.steps else None for r in sim]),
        "measured_s": _median([r.records.steps[-1].end_s if r.records.steps else None
                               for r in real]),
    }
    arms = _arms(plan, sim, real)
    fastest = _vs_fastest(plan, sim, real)
    batches = batch_comparison(plan, sim, real)
    drift_section = drift(real, cost)
    machine = _machine(world, profile)
    return {
        "step_mape": total["mape"],
        "step_max_error": total["max_error"],
        "arms": arms,
        "vs_fastest_repeat": fastest,
        "targets": targets(arms, drift_section, machine, fastest),
        "measured_repeat_spread": _repeat_spread(plan, real),
        "same_batches": all(run["same"] for run in batches["runs"]),
        "step_errors": {
            "all": total,
            "by_kind": {k: _errors([p for p, x in zip(pred, kinds, strict=True) if x == k],
                                   [m for m, x in zip(meas, kinds, strict=True) if x == k])
                        for k in sorted(set(kinds))},
            "by_stage": {k: _errors([p for p, x in zip(pred, stages, strict=True) if x == k],
                                    [m for m, x in zip(meas, stages, strict=True) if x == k])
                         for k in sorted(set(stages))},
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
                    "held_out_mape": profile.provenance.held_out_mape,
                    "date": profile.provenance.date, "device": profile.provenance.device,
                    "num_threads": profile.provenance.num_threads},
        "target": plan.target,
        "scenario": plan.scenario.name,
        "reference_point_id": plan.reference_point_id,
    }
