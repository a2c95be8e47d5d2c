"""``loopserve profile``: host syncs measured by ``torch.profiler`` per arm (RFC §6).

    loopserve profile SCENARIO [--target cpu|cuda] [--steps N] [--out DIR] [--set KEY=VALUE]

Each arm runs the scenario's reference point (repeat 0's workload) untimed on the real engine
under ``torch.profiler``; every step is marked (``loopserve.step.<kind>``), so the sync sites
(``loopserve.runs.sync_profile``) are counted per step, per stage kind and per generated
token, with their wait times, beside the runner's own readback count over the same steps.
``--steps N`` profiles the first N steps of each arm and ends it there. On CUDA every
profiled step also runs under ``torch.cuda.set_sync_debug_mode("warn")`` (``sync_debug``).
Writes ``profile.json`` (per arm ``profiler_syncs``, ``runner_readbacks``, ``per_kind``,
``per_step``, ``sites``) and ``trace-<arm>.json`` (Chrome trace) under
``results/<name>/profile-<target>-<id>/`` or ``--out``; exits 1 with one line per
disagreement when the profiler and the runner differ anywhere.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from loopserve.commands import command_help
from loopserve.commands.args import add_scenario_flags, integer
from loopserve.outputs import files
from loopserve.plan import plan_runs, run_source
from loopserve.runs.sync_profile import StepInfo, arm_summary, assign, mismatches
from loopserve.schema import load_scenario

RESULTS_ROOT = Path("results")
ALL_STEPS = 1 << 40


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("profile", help=command_help("profile"))
    p.add_argument("scenario", help="scenario YAML")
    p.add_argument("--target", default="cpu", choices=("cpu", "cuda"),
                   help="real engine to profile (default cpu)")
    p.add_argument("--steps", default=None,
                   help="profile the first N steps of each arm, then end it (default: all)")
    add_scenario_flags(p, "folder for profile.json and the traces (default "
                       "results/<name>/profile-...)")
    p.set_defaults(handler=main)


class _Enough(BaseException):
    """Ends an arm's run after its profiled steps (a BaseException: the realtime loop turns
    an Exception from ``execute`` into a failed batch)."""


def profile_arm(cfg: Any, source: Any, runner: Any, max_steps: int, trace: Path,
                cuda: bool) -> dict[str, Any]:
    """Run ``source`` on ``runner`` under the profiler for at most ``max_steps`` steps;
    profile.json's entry of the arm. On CUDA each step also runs under
    ``torch.cuda.set_sync_debug_mode("warn")``, whose warnings are counted per step
    (``sync_debug``: an extra detector that does not see every sync)."""
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from engine.core.request import Stage
    from engine.core.results import step_kind
    from engine.realtime import run_realtime

    infos: list[StepInfo] = []
    debug: list[int] = []
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    inner = runner.execute

    def execute(batch: Any) -> Any:
        if len(infos) >= max_steps:
            raise _Enough
        kind = step_kind(batch)
        with record_function(f"loopserve.step.{kind}"), warnings.catch_warnings(
                record=True) as seen:
            warnings.simplefilter("always")
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                result = inner(batch)
            finally:
                if cuda:
                    torch.cuda.set_sync_debug_mode("default")
        debug.append(sum("synchroniz" in str(w.message) for w in seen))
        tokens = len(batch.items) if batch.stage is Stage.CODA else 0
        infos.append(StepInfo(batch.step, kind, tokens, runner.readbacks.last_step))
        return result

    runner.execute = execute
    with profile(activities=activities, record_shapes=True) as prof:  # dtypes tell copies apart
        try:
            with torch.inference_mode():
                run_realtime(cfg, source, runner)
        except _Enough:
            pass
    prof.export_chrome_trace(str(trace))
    outside = assign(infos, prof.events(), cuda)
    summary = arm_summary(infos, outside)
    if cuda:
        summary["sync_debug"] = {"syncs": sum(debug), "per_step": debug}
    return {**summary, "trace": trace.name}


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from loopserve.targets.real import RealTarget

    scn = load_scenario(args.scenario, args.sets)
    max_steps = ALL_STEPS if args.steps is None else integer("--steps", args.steps, 1)
    plan = plan_runs(scn, args.target)
    target = RealTarget(scn, args.target)
    ref = plan.reference_point_id
    point = plan.point(ref)
    dest = files.run_destination(args.out, RESULTS_ROOT / scn.name, f"profile-{args.target}")
    doc: dict[str, Any] = {"scenario": scn.name, "target": args.target, "point_id": ref,
                           "steps_limit": None if args.steps is None else max_steps,
                           "arms": {}}
    with files.staged_dir(dest) as tmp:
        for arm in scn.arms:
            spec = next(r for r in plan.runs
                        if r.arm == arm and r.point_id == ref and r.repeat == 0)
            source = run_source(point.scenario, spec.seed, plan.shape)
            runner = target.runner(spec.cfg, spec.seed)
            doc["arms"][arm] = profile_arm(spec.cfg, source, runner, max_steps,
                                           tmp / f"trace-{arm}.json", args.target == "cuda")
        doc["runner"] = target.info()
        files.write_json(tmp / "profile.json", doc)
    print(table(doc))
    print(f"profile: {dest / 'profile.json'}")
    problems = [m for arm, s in doc["arms"].items() for m in mismatches(arm, s)]
    for line in problems:
        print(f"loopserve: error: profile: {line}", file=sys.stderr)
    return 1 if problems else 0


def table(doc: dict[str, Any]) -> str:
    """Per arm and stage kind: steps, profiler syncs, runner readbacks, wait (ms)."""
    lines = [f"{'arm':<10} {'kind':<8} {'steps':>6} {'profiler':>9} {'runner':>7} "
             f"{'wait ms':>8}"]
    for arm, s in doc["arms"].items():
        for kind, g in s["per_kind"].items():
            lines.append(f"{arm:<10} {kind:<8} {g['steps']:>6} {g['profiler_syncs']:>9} "
                         f"{g['runner_readbacks']:>7} {g['wait_s'] * 1e3:>8.2f}")
        per_token = s["syncs_per_token"]
        lines.append(f"{arm:<10} {'all':<8} {s['num_steps']:>6} {s['profiler_syncs']:>9} "
                     f"{s['runner_readbacks']:>7} {s['wait_s'] * 1e3:>8.2f}  "
                     f"({per_token if per_token is None else round(per_token, 3)} per token)")
    return "\n".join(lines)
