"""The simulation again at the measured runs' own speed: the model's shape apart from the
machine's speed.

A profile is timed minutes before the runs, and a shared machine's speed moves within
minutes. An open-loop workload amplifies that: slower steps let more decoders overlap, so
batches grow and the simulated ITL moves by more than the step time. So a fidelity run also
simulates with every term of the profile (stages, host gap, exit extras) scaled by
one factor, ``step_time_ratio``: the measured runs' step time over the profile's prediction of
the same steps, summed over every step at the reference point. What error is left there
is the model's: which steps run, how they batch, how their times differ from each other.
It reads the measured times, so it is not a prediction; ``targets`` never looks at it.
"""

from __future__ import annotations

from dataclasses import replace

from loopserve.fidelity.compare import arm_errors
from loopserve.fidelity.doc import ArmErrors, AtRunSpeed
from loopserve.fidelity.world import WorldRun, run_sim
from loopserve.plan import Plan
from sim.cost.calibrated import CalibratedCost
from sim.cost.profile import GridTerm, Profile, StageFit


def step_time_ratio(plan: Plan, real: list[WorldRun], cost: CalibratedCost) -> float | None:
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


def at_run_speed(plan: Plan, real: list[WorldRun], cost: CalibratedCost) -> AtRunSpeed:
    """The ``at_run_speed`` section: the factor and, per arm, the errors of a simulation with
    ``cost``'s profile scaled by it (None without measured steps)."""
    factor = step_time_ratio(plan, real, cost)
    if factor is None:
        return {"step_time_ratio": None, "arms": None}
    scaled = CalibratedCost(scaled_profile(cost.profile, factor))
    scaled_plan = replace(plan, points=[replace(p, cost=scaled) for p in plan.points])
    sim = run_sim(scaled_plan, progress=False)
    return {"step_time_ratio": factor, "arms": arm_errors(plan, sim, real)}


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
