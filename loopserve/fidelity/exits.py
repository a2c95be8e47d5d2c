"""Fidelity of exit depths, per arm at the reference point: the exit-depth distribution of
the decode tokens (the first output token of a request, which always runs all D loops, left
out), measured and simulated, their total-variation distance, mean loops per token and core
calls per output token."""

from __future__ import annotations

from loopserve.fidelity.doc import ExitArm, ExitsSection, ExitWorld
from loopserve.fidelity.world import WorldRun
from loopserve.runs.plan import Plan
from sim.exit_profile import depth_histogram, tv_distance


def _world(runs: list[WorldRun], num_depths: int) -> ExitWorld:
    depths = [t.exit_depth for r in runs for t in r.records.tokens if t.index > 0]
    outputs = sum(len(r.records.tokens) for r in runs)
    calls = sum(s.core_calls for r in runs for s in r.records.steps)
    return {
        "depth_fractions": [round(f, 6) for f in depth_histogram(depths, num_depths)],
        "mean_loops": round(sum(depths) / len(depths), 6) if depths else None,
        "core_calls_per_output_token": round(calls / outputs, 6) if outputs else None,
        "num_tokens": len(depths),
    }


def exit_fidelity(plan: Plan, sim: list[WorldRun], real: list[WorldRun]) -> ExitsSection:
    """The ``exits`` section of fidelity.json."""
    d = plan.shape.num_depths
    ref = plan.reference_point_id
    arms: dict[str, ExitArm] = {}
    for arm in plan.scenario.arms:
        s = _world([r for r in sim if r.spec.arm == arm and r.spec.point_id == ref], d)
        m = _world([r for r in real if r.spec.arm == arm and r.spec.point_id == ref], d)
        arms[arm] = {"sim": s, "measured": m, "tv_distance": round(
            tv_distance(s["depth_fractions"], m["depth_fractions"]), 6)}
    src = plan.exits.get(ref)
    return {"exit_model": src.describe() if src is not None else {"kind": "core"}, "arms": arms}


def exit_lines(section: ExitsSection) -> list[str]:
    """The CLI table's exit-depth lines."""
    model = section["exit_model"]
    rows = f", {model['rows']}" if model.get("rows") else ""
    lines = [f"exit depths (exit model: {model.get('kind')}{rows}):"]
    for arm, a in section["arms"].items():
        def fmt(w: ExitWorld) -> str:
            fr = "/".join(f"{100 * f:.1f}" for f in w["depth_fractions"])
            ml, cc = w["mean_loops"], w["core_calls_per_output_token"]
            return (f"{fr}% mean {ml if ml is None else f'{ml:.2f}'} calls/tok "
                    f"{cc if cc is None else f'{cc:.2f}'}")
        lines.append(f"  {arm:<10} sim {fmt(a['sim'])} | measured {fmt(a['measured'])} | "
                     f"TV {a['tv_distance']:.3f}")
    return lines
