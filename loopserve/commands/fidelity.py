"""``loopserve fidelity``: one scenario simulated with a calibrated profile and run on the real
target (same configs, workloads and seeds), then compared.

    loopserve fidelity SCENARIO --profile FILE --target cpu|cuda [--out DIR] [--set k=v ...]

Writes ``fidelity.json`` (docs/design.md: ``step_mape``, ``step_max_error``, ``arms`` with the
sim / measured / rel_error of six metrics per arm, ``same_batches``; plus per-kind and
per-stage step errors, the host-gap error and the batch-sequence comparison), ``report.html``,
``steps.csv`` (both worlds, each measured step with its prediction), ``scenario.yaml`` and
``env.json``, into a folder that appears complete or not at all.

With ``repeats`` >= 2 the measured runs are interleaved across arms and compared both as the
median (``arms``) and as the fastest repeat (``vs_fastest_repeat``): a shared machine's
neighbours only ever add time. ``targets`` gives the verdict; ``drift``, ``machine`` and
``at_run_speed`` read the machine's own speed apart from the model's error
(``loopserve.fidelity.machine``); ``tail`` splits the slowest 1% of token intervals of each
measured run by step kind (``loopserve.fidelity.tail``), which tells a cost term from machine
noise in ITL p99.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from engine.host_allocator import steady_allocator
from loopserve.commands import command_help
from loopserve.commands.args import add_scenario_flags, real_target
from loopserve.errors import UserError
from loopserve.fidelity.compare import compare
from loopserve.fidelity.exits import exit_lines
from loopserve.fidelity.json_types import FidelityDoc, MetricError
from loopserve.fidelity.machine import at_run_speed, drift_lines, speed_lines
from loopserve.fidelity.report import write_fidelity_report
from loopserve.fidelity.tail import tail_lines
from loopserve.fidelity.targets import target_lines
from loopserve.fidelity.world import WorldRun, run_sim
from loopserve.outputs import env_info, files
from loopserve.plan import plan_runs
from loopserve.plan.exit_source import exit_models
from loopserve.runs import interrupts
from loopserve.schema import load_scenario
from loopserve.schema.scenario import Scenario
from loopserve.targets.load import check_real
from sim.cost.after_idle import AfterIdleCost
from sim.cost.base import SplitCostModel
from sim.cost.calibrated import CalibratedCost
from sim.cost.profile import Profile, load_profile
from sim.cost.resolve import model_label


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``fidelity`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("fidelity", help=command_help("fidelity"))
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--profile", required=True, help="calibrated profile JSON")
    p.add_argument("--target", required=True, help="cpu | cuda")
    add_scenario_flags(p, "folder to write (default results/<name>/<run-id>)")
    p.set_defaults(handler=main)


def _fix(scn: Scenario, target: str) -> str:
    return f"run `loopserve calibrate --target {target} --model {scn.model}`"


def check_profile(path: str, scn: Scenario, target: str) -> Profile:
    """Load ``path`` and check it fits the scenario and target; UserError naming --profile."""
    try:
        prof = load_profile(path)
    except ValueError as err:
        raise UserError("--profile", str(err).removeprefix("cost.profile: ")) from None
    model = model_label(scn.model)
    fix = _fix(scn, target)
    if prof.model != model:
        raise UserError("--profile", f"{path} was measured for model {prof.model!r} but scenario "
                        f"{scn.name!r} uses {model!r}; {fix} or pass that model's profile")
    if prof.hardware != scn.hardware:
        raise UserError("--profile", f"{path} was measured on hardware {prof.hardware!r} but "
                        f"scenario {scn.name!r} simulates {scn.hardware!r}; use a "
                        f"{scn.hardware} profile or --set hardware={prof.hardware}")
    if (target == "cpu") != (prof.hardware == "cpu"):
        raise UserError("--profile", f"{path} was measured on {prof.hardware!r}, not on the "
                        f"--target {target} device; {fix}")
    return prof


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Plan both worlds, run them, compare, write; UserError on bad input (exit 2)."""
    started = time.time()
    real_target(args.target)
    scn = load_scenario(args.scenario, args.sets)
    prof = check_profile(args.profile, scn, args.target)
    check_real(args.target)
    # Lazy: the measured world loads torch, which only a fidelity run (not the CLI) needs.
    with interrupts.importing():
        from loopserve.calibrate.job import gpu_hardware
        from loopserve.fidelity.measured import run_real

    here = gpu_hardware() if args.target == "cuda" else None
    if here is not None and here != prof.hardware:
        raise UserError("--profile", f"{args.profile} was measured on {prof.hardware!r} but "
                        f"this GPU is {here!r}; {_fix(scn, args.target)}")
    profile_abs = str(Path(args.profile).resolve())
    sets = [*args.sets, "cost=" + json.dumps({"kind": "calibrated", "profile": profile_abs})]
    if args.target == "cpu" and prof.provenance.num_threads:
        # Measure with the threads the profile was measured with (recorded in scenario.yaml).
        sets.append(f"runner.num_threads={prof.provenance.num_threads}")
    cal = load_scenario(args.scenario, sets)
    sim_plan = plan_runs(cal, "sim")
    real_plan = plan_runs(cal, args.target)
    allocator = steady_allocator()  # as at calibration (see engine.host_allocator)
    dest = files.run_destination(args.out, Path("results") / scn.name,
                                 f"fidelity-{args.target}")
    progress = not args.no_progress
    # The measured world first, in a process not yet holding the simulator's records.
    real_world = run_real(real_plan, prof, progress=progress)
    real_runs = real_world.runs
    cost = sim_plan.points[0].cost
    assert isinstance(cost, CalibratedCost | AfterIdleCost)  # the plan's cost is the profile's
    with interrupts.deferred():  # the compiled simulator must not see a signal's exception
        sim_runs = run_sim(sim_plan, progress=progress)
        at_speed = at_run_speed(sim_plan, real_runs, cost, prof)
    result = compare(sim_plan, sim_runs, real_world, cost, prof, allocator, at_speed)
    with files.staged_dir(dest) as tmp:
        files.write_json(tmp / "fidelity.json", result)
        files.write_scenario(tmp / "scenario.yaml", cal)
        _write_steps(tmp / "steps.csv", sim_runs, real_runs, cost)
        files.write_json(tmp / "env.json", env_info.collect(
            target=args.target, hardware=scn.hardware, run_id=dest.name, argv=argv,
            started_s=started, run_wall_s=[
                {"world": w, "arm": r.spec.arm, "point_id": r.spec.point_id,
                 "repeat": r.spec.repeat, "wall_s": round(r.records.wall_s, 6)}
                for w, runs in (("sim", sim_runs), ("measured", real_runs)) for r in runs],
            runner=real_plan.real.info() if real_plan.real is not None else None,
            cost_model=sim_plan.cost_model,
            exit_model=exit_models({p.point_id: p.exits for p in sim_plan.points})))
        write_fidelity_report(tmp / "report.html", scn, result, sim_runs, real_runs, cost)
    print(_table(result))
    print(f"report: {dest / 'report.html'}")
    return 0


def _write_steps(path: Path, sim_runs: list[WorldRun], real_runs: list[WorldRun],
                 cost: SplitCostModel) -> None:
    cols = ("world", "arm", "point_id", "repeat", "step", "start_s", "end_s", "kind",
            "core_calls", "num_decode_items", "num_prompt_tokens", "predicted_s", "cpu_s")
    rows = []
    for world, runs in (("sim", sim_runs), ("measured", real_runs)):
        for r in runs:
            for i, (s, pred) in enumerate(zip(r.records.steps, r.predict(cost), strict=True)):
                cpu = r.cpu_s[i] if r.cpu_s else ""
                rows.append((world, r.spec.arm, r.spec.point_id, r.spec.repeat, s.step,
                             s.start_s, s.end_s, s.kind, s.core_calls, s.num_decode_items,
                             s.num_prompt_tokens, pred, cpu))
    files.write_csv(path, cols, rows)


def _table(result: FidelityDoc) -> str:
    fastest = result.get("vs_fastest_repeat") or {}
    head = f"{'arm':<10} {'metric':<13} {'sim':>10} {'measured':>10} {'error':>8}"
    if fastest:
        head += f" {'fastest':>10} {'error':>8}"
    lines = [head, "-" * len(head)]

    def cells(v: MetricError | int) -> str:
        assert not isinstance(v, int)  # a metric's errors, never the repeat
        err = f"{100 * v['rel_error']:+.1f}%" if v["rel_error"] is not None else "-"
        meas = f"{v['measured']:.4g}" if v["measured"] is not None else "-"
        return f"{meas:>10} {err:>8}"

    for arm, metrics in result["arms"].items():
        for name, v in metrics.items():
            sim = f"{v['sim']:.4g}" if v["sim"] is not None else "-"
            line = f"{arm:<10} {name:<13} {sim:>10} {cells(v)}"
            if arm in fastest:
                line += f" {cells(fastest[arm][name])}"
            lines.append(line)
    mape, worst = result["step_mape"], result["step_max_error"]
    lines.append(f"per-step MAPE {'-' if mape is None else f'{100 * mape:.2f}%'} (worst "
                 f"{'-' if worst is None else f'{100 * worst:.1f}%'}); same batches: "
                 f"{result['same_batches']}")
    slow = result["machine"]["slowdown_vs_calibration"]
    if slow:
        lines.append("machine now vs at calibration (probe steps): " + ", ".join(
            f"{k} x{v:.2f}" for k, v in slow.items()))
    lines.extend(speed_lines(result["at_run_speed"]))
    lines.extend(exit_lines(result["exits"]))
    lines.extend(drift_lines(result["drift"]))
    lines.extend(tail_lines(result["tail"]))
    lines.extend(target_lines(result["targets"]))
    return "\n".join(lines)

