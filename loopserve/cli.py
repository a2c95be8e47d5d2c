"""The ``loopserve`` command: run | sweep | report (DESIGN.md §12).

Bad input of any kind prints ``loopserve: error: <field>: <message>`` on one line and exits 2
with nothing written; runs finish in memory before the output folder is staged and renamed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from loopserve.errors import UserError

if TYPE_CHECKING:
    from loopserve.runs.loop import RunResult
    from loopserve.runs.plan import Plan

EXIT_OK, EXIT_USAGE = 0, 2
RESULTS_ROOT = Path("results")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loopserve",
        description="Serving engine and simulator for looped language models.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in (
        ("run", "run a scenario (all arms, sweep points and repeats)"),
        ("sweep", "like run, for a scenario that has a sweep or variants section"),
    ):
        r = sub.add_parser(name, help=help_text)
        r.add_argument("scenario", help="scenario YAML file")
        r.add_argument("--target", default="sim", choices=("sim", "cpu", "cuda"),
                       help="simulator (default) or the real engine on cpu / cuda")
        r.add_argument("--out", help="run folder to write (default results/<name>/<run-id>)")
        r.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                       help="override a dotted field, value parsed as YAML (repeatable)")
        r.add_argument("--no-progress", action="store_true", help="hide the progress bar")
        r.set_defaults(handler=lambda a, argv, sweep=name == "sweep": cmd_run(
            a, require_sweep=sweep, argv=argv))
    rep = sub.add_parser("report", help="one report.html comparing one or more run folders")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    rep.add_argument("--out", help="folder for report.html (default: the first RUN_DIR)")
    rep.set_defaults(handler=lambda a, argv: cmd_report(a.run_dirs, a.out))
    from loopserve import calibrate_cmd
    from loopserve.commands import fidelity, serve

    calibrate_cmd.add_parser(sub)
    fidelity.add_parser(sub)
    serve.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        # every subcommand sets its handler(args, argv): argv is recorded in env.json
        return int(args.handler(args, list(sys.argv if argv is None else ["loopserve", *argv])))
    except UserError as err:
        print(f"loopserve: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("loopserve: interrupted; nothing written", file=sys.stderr)
        return 130


def cmd_run(args: argparse.Namespace, *, require_sweep: bool, argv: list[str]) -> int:
    from loopserve.outputs.files import run_destination
    from loopserve.runs.loop import execute
    from loopserve.runs.plan import plan_runs
    from loopserve.schema import load_scenario

    started = time.time()
    scn = load_scenario(args.scenario, args.sets)
    if require_sweep and not scn.is_sweep:
        raise UserError("sweep", "missing; `loopserve sweep` needs a sweep or variants section "
                        "(or use `loopserve run`)")
    plan = plan_runs(scn, args.target)
    dest = run_destination(args.out, RESULTS_ROOT / scn.name, args.target)
    results = execute(plan, progress=not args.no_progress)
    report = write_run(dest, plan, results, argv=argv, started_s=started)
    print(medians_table(dest, plan.reference_point_id, len(plan.points)))
    print(f"report: {report}")
    return EXIT_OK


def write_run(dest: Path, plan: Plan, runs: Sequence[RunResult], *, argv: list[str],
              started_s: float) -> Path:
    """Write every output file into a staging folder, render the report, rename to dest."""
    from loopserve.outputs import env_info, files, records
    from loopserve.outputs.rundata import load_run
    from loopserve.outputs.trace import write_trace
    from loopserve.report.page import write_run_report
    from loopserve.runs.summary import build_summary

    scn = plan.scenario
    with files.staged_dir(dest) as tmp:
        files.write_scenario(tmp / "scenario.yaml", scn)
        records.write_records(tmp, runs)
        files.write_json(tmp / "summary.json", build_summary(plan, runs))
        write_trace(tmp / "trace.json", runs, scn.arms, {plan.reference_point_id})
        timing = [{"arm": r.spec.arm, "point_id": r.spec.point_id, "repeat": r.spec.repeat,
                   "wall_s": round(r.records.wall_s, 6)} for r in runs]
        files.write_json(tmp / "env.json", env_info.collect(
            target=plan.target, hardware=scn.hardware, run_id=dest.name, argv=argv,
            started_s=started_s, run_wall_s=timing))
        write_run_report([load_run(tmp, label=dest.name)], tmp, write_pngs=True)
    return dest / "report.html"


def medians_table(run_dir: Path, point_id: int, num_points: int) -> str:
    """The short per-arm table printed at the end of a run."""
    from loopserve.outputs.rundata import load_run
    from loopserve.report.compare import metric

    run = load_run(run_dir)
    head = f"{'arm':<10} {'ITL p50':>9} {'ITL p99':>9} {'TTFT p50':>10} {'TTFT p99':>10} " \
           f"{'out tok/s':>10}  validity"
    lines = [head, "-" * len(head)]
    for m in run.medians(point_id):
        vals = [metric(m, "itl_ms", "p50"), metric(m, "itl_ms", "p99"),
                metric(m, "ttft_ms", "p50"), metric(m, "ttft_ms", "p99"),
                metric(m, "output_tok_s", None)]
        cells = [f"{v:>{w}.4g}" if v is not None else f"{'-':>{w}}"
                 for v, w in zip(vals, (9, 9, 10, 10, 10), strict=True)]
        valid = "valid" if m["valid"] else f"INVALID ({m['num_valid']}/{m['num_repeats']} valid)"
        lines.append(f"{m['arm']:<10} {' '.join(cells)}  {valid}")
    where = f"point {point_id} of {num_points}: " + (
        ", ".join(f"{k}={v}" for k, v in run.point_values(point_id).items()) or "base")
    return f"medians over repeats (ms; {where})\n" + "\n".join(lines)


def cmd_report(run_dirs: Sequence[str], out: str | None) -> int:
    from loopserve.outputs.files import atomic_write
    from loopserve.outputs.rundata import RunData, load_run
    from loopserve.report.page import make_figures, render_html

    runs: list[RunData] = []
    for d in run_dirs:
        run = load_run(d)
        if sum(Path(x).name == Path(d).name for x in run_dirs) > 1:
            run.label = f"{run.label} ({len(runs) + 1})"
        runs.append(run)
    out_dir = Path(out) if out else runs[0].path
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = make_figures(runs)
    if len(runs) == 1 and out_dir.resolve() == runs[0].path.resolve():
        for f in figs:
            (out_dir / f.filename).write_bytes(f.png)
    path = out_dir / "report.html"
    atomic_write(path, render_html(runs, figs))
    print(f"report: {path}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
