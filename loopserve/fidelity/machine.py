"""The measured machine's own speed in a fidelity run, read apart from the model's error.

A profile is timed minutes before the runs it is compared with, and a shared machine's speed
moves within minutes (its neighbours' memory traffic, clocks). No cost model of a step can
predict that, so a fidelity run measures it and reads the model's error beside it. This module
is where fidelity handles the machine's drift:

- ``drift``: per measured run, measured / predicted execute time of its decode-only core
  calls (the most numerous kind, and the most sensitive to memory bandwidth), the median of
  each tenth of the run in step order. A flat row near 1: the profile holds throughout; a row
  that wanders: the machine changed speed mid-run.
- ``machine``: the calibration's reference probes, timed just before and after the measured
  runs, against their times at calibration: > 1, the machine runs slower than when the
  profile was measured, a bias no model can see.
- ``unsteady``: why the machine does not count as steady (``targets.machine_steady``): a run
  whose decode steps drifted past ``MAX_DRIFT_RANGE`` of their own level, probes after the
  runs more than ``MAX_PROBE_SHIFT`` off those before, or more than
  ``MAX_CALIBRATION_SHIFT`` off calibration. Outside those bounds a missed target says more
  about the neighbours than about the model.
- ``vs_fastest_repeat``: the simulation against the measured repeat with the shortest
  makespan. Neighbours only ever add time, so the fastest of several interleaved repeats is
  the best estimate of the undisturbed machine the profile measured.
- ``at_run_speed``: the simulation again with every term of the profile (stages, host gap,
  exit extras) scaled by one factor, ``step_time_ratio``: the measured runs' step time over
  the profile's prediction of the same steps, summed over every step at the reference point.
  An open-loop workload amplifies a speed change (slower steps let more decoders overlap, so
  batches grow), and what error is left at the runs' own speed is the model's: which steps
  run, how they batch, how their times differ. It reads the measured times, so it is a
  diagnostic, not a prediction; ``targets`` never looks at it.

The ``tail`` section reads the same noise per token interval: a kind's tail steps well above
its whole-run ratio are short bursts of it (``loopserve.fidelity.tail``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from loopserve.fidelity.arm_errors import METRICS, arm_errors, at_reference, metric_row
from loopserve.fidelity.json_types import (
    ArmErrors,
    AtRunSpeed,
    DriftRun,
    DriftSection,
    FastestErrors,
    Machine,
)
from loopserve.fidelity.world import RealWorld, WorldRun, run_sim
from loopserve.plan import Plan
from loopserve.stats.metrics import metric
from sim.cost.base import SplitCostModel
from sim.cost.calibrated import CalibratedCost
from sim.cost.profile import GridTerm, Profile, StageFit
from sim.cost.resolve import compose

NUM_PARTS = 10
KIND = "decode"
MAX_DRIFT_RANGE = 1.15
MAX_PROBE_SHIFT = 0.15
MAX_CALIBRATION_SHIFT = 0.10  # probes now vs at calibration (the profile's own speed)


def drift(real: list[WorldRun], cost: SplitCostModel) -> DriftSection:
    """The ``drift`` section of fidelity.json: per measured run, the ratio by tenth."""
    runs: list[DriftRun] = []
    for r in real:
        ratios = [x for s, x in zip(r.records.steps, r.ratios(cost), strict=True)
                  if s.kind == KIND and x == x]
        parts = ([float(np.median(chunk)) for chunk in np.array_split(ratios, NUM_PARTS)]
                 if len(ratios) >= NUM_PARTS else None)
        runs.append({
            "arm": r.spec.arm, "point_id": r.spec.point_id, "repeat": r.spec.repeat,
            "num_steps": len(ratios), "ratio_by_tenth": parts,
            "range": (max(parts) / min(parts)) if parts else None,
        })
    return {"kind": KIND, "measure": "measured / predicted execute time", "runs": runs}


def machine(world: RealWorld, profile: Profile) -> Machine:
    """The ``machine`` section: the probe times at calibration, before and after the runs,
    and their mean now over their calibration time."""
    cal = profile.provenance.probe_s or {}
    now = {k: 0.5 * (world.probes_before[k] + world.probes_after[k])
           for k in world.probes_before}
    return {"probe_s_calibration": cal or None, "probe_s_before": world.probes_before,
            "probe_s_after": world.probes_after,
            "slowdown_vs_calibration": {k: now[k] / cal[k] for k in now if cal.get(k)} or None}


def unsteady(drift: DriftSection, machine: Machine) -> list[str]:
    """Why the machine did not hold still, one reason a line (empty: it did)."""
    reasons = [
        f"{r['arm']} r{r['repeat']}: decode steps ran x{min(tenths):.2f}.."
        f"x{max(tenths):.2f} their prediction"
        for r in drift["runs"] if (tenths := r["ratio_by_tenth"]) is not None
        and r["range"] is not None and r["range"] > MAX_DRIFT_RANGE
    ]
    before, after = machine.get("probe_s_before") or {}, machine.get("probe_s_after") or {}
    reasons += [
        f"probe {k} read {after[k] / before[k]:.2f}x after the runs what it read before"
        for k in sorted(before) if k in after and before[k] > 0
        and abs(after[k] / before[k] - 1.0) > MAX_PROBE_SHIFT
    ]
    slow = machine.get("slowdown_vs_calibration") or {}
    reasons += [
        f"probe {k} ran {v:.2f}x its calibration time" for k, v in sorted(slow.items())
        if abs(v - 1.0) > MAX_CALIBRATION_SHIFT
    ]
    return reasons


def vs_fastest_repeat(plan: Plan, sim: list[WorldRun],
                      real: list[WorldRun]) -> dict[str, FastestErrors] | None:
    """Per arm, the sim against the measured repeat with the shortest makespan (None with one
    repeat); the median (``arms``) is the typical run."""
    if plan.scenario.repeats < 2:
        return None
    out: dict[str, FastestErrors] = {}
    for arm in plan.scenario.arms:
        runs = [r for r in at_reference(plan, real, arm) if r.records.steps]
        if runs:
            best = min(runs, key=lambda r: r.records.steps[-1].end_s)
            out[arm] = {"repeat": best.spec.repeat, **metric_row(at_reference(plan, sim, arm), {
                name: metric(best.metrics, key, sub) for name, (key, sub) in METRICS.items()})}
    return out


def step_time_ratio(plan: Plan, real: list[WorldRun], cost: SplitCostModel) -> float | None:
    """Measured over predicted (``cost``) execute time, summed over the measured runs' steps
    at the reference point; None without steps."""
    meas = pred = 0.0
    for r in real:
        if r.spec.point_id != plan.reference_point_id:
            continue
        meas += sum(s.end_s - s.start_s for s in r.records.steps)
        pred += sum(r.predict(cost))
    return meas / pred if pred > 0 else None


def _grid(g: GridTerm | None, factor: float) -> GridTerm | None:
    return None if g is None else g.model_copy(
        update={"values_s": [v * factor for v in g.values_s]})


def _fit(f: StageFit | None, factor: float) -> StageFit | None:
    if f is None:
        return None
    return f.model_copy(update={"coef": [c * factor for c in f.coef],
                                "intercept_s": f.intercept_s * factor,
                                "grid": _grid(f.grid, factor),
                                "rows_grid": _grid(f.rows_grid, factor)})


def scaled_profile(profile: Profile, factor: float) -> Profile:
    """``profile`` with every predicted time multiplied by ``factor``."""
    return profile.model_copy(update={
        "stages": {k: _fit(v, factor) for k, v in profile.stages.items()},
        "step_gap": _fit(profile.step_gap, factor),
        "signals": _fit(profile.signals, factor),
        "finalize": _fit(profile.finalize, factor)})


def at_run_speed(plan: Plan, real: list[WorldRun], cost: SplitCostModel,
                 profile: Profile) -> AtRunSpeed:
    """The ``at_run_speed`` section: the factor and, per arm, the errors of a simulation with
    ``profile`` (``cost``'s) scaled by it (None without measured steps)."""
    factor = step_time_ratio(plan, real, cost)
    if factor is None:
        return {"step_time_ratio": None, "arms": None}
    scaled_prof = scaled_profile(profile, factor)
    scaled = compose(CalibratedCost(scaled_prof), scaled_prof)
    scaled_plan = replace(plan, points=[replace(p, cost=scaled) for p in plan.points])
    sim = run_sim(scaled_plan, progress=False)
    return {"step_time_ratio": factor, "arms": arm_errors(plan, sim, real)}


def drift_lines(section: DriftSection) -> list[str]:
    """One line per measured run for the printed table."""
    lines = []
    for r in section["runs"]:
        if r["ratio_by_tenth"]:
            tenths = " ".join(f"{v:.2f}" for v in r["ratio_by_tenth"])
            lines.append(f"  {r['arm']:<10} r{r['repeat']}: {tenths}  (range x{r['range']:.2f})")
    if lines:
        lines.insert(0, f"measured / predicted {section['kind']} step time, by tenth of each "
                        "run (the machine's own drift):")
    return lines


def speed_lines(section: AtRunSpeed | None) -> list[str]:
    """The CLI table's line: ITL p50 and TTFT p50 errors per arm at the runs' own speed."""
    if section is None or section["arms"] is None or section["step_time_ratio"] is None:
        return []

    def err(row: ArmErrors, name: str) -> str:
        e = row[name]["rel_error"]
        return "-" if e is None else f"{100 * e:+.1f}%"

    arms = section["arms"]
    return [f"at the runs' own speed (profile x{section['step_time_ratio']:.3f}, measured / "
            "predicted step time; a diagnostic, not a prediction): ITL p50 "
            + "/".join(err(r, "itl_p50_ms") for r in arms.values()) + ", TTFT p50 "
            + "/".join(err(r, "ttft_p50_ms") for r in arms.values())
            + f" ({'/'.join(arms)})"]
