"""``loopserve run`` and ``loopserve sweep``: plan a scenario, execute every run, write the run
folder (docs/design.md) and print the per-arm medians. vLLM's result flags
(``--percentile-metrics``, ``--metric-percentiles``, ``--goodput``) are parsed before any run,
so a bad value is one line (exit 2) with nothing run or written.

Runs finish in memory before the output folder is staged and renamed, so bad input or an
interrupted run leaves nothing behind.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from loopserve.commands import command_help
from loopserve.commands.args import (
    add_scenario_flags,
    flag_error,
    integer,
    parse_goodput,
    parse_metrics,
    parse_percentiles,
)
from loopserve.errors import UserError
from loopserve.outputs import env_info, files, records
from loopserve.outputs.rundata import load_run
from loopserve.outputs.tables import FORMATS
from loopserve.outputs.trace import write_trace
from loopserve.outputs.vllm_results import (
    METRICS,
    RUN_PERCENTILES,
    ResultOptions,
    vllm_run_results,
)
from loopserve.plan import TARGETS, Plan, equal_arms, plan_runs
from loopserve.plan.exit_source import exit_models, unmeasured_note
from loopserve.report.page import write_run_report
from loopserve.runs import interrupts
from loopserve.runs.loop import execute
from loopserve.schema import load_scenario
from loopserve.stats.metrics import RunResult, metric
from loopserve.stats.summary import build_summary

if TYPE_CHECKING:
    from loopserve.runs.ray_runs import RayOptions

RESULTS_ROOT = Path("results")
DEFAULT_METRICS = ",".join(METRICS)
DEFAULT_PERCENTILES = ",".join(f"{p:g}" for p in RUN_PERCENTILES)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``run`` and ``sweep`` (the same command; sweep requires a sweep section)."""
    for name in ("run", "sweep"):
        r = sub.add_parser(name, help=command_help(name))
        r.add_argument("scenario", help="scenario YAML file")
        r.add_argument("--target", default="sim", choices=TARGETS,
                       help="simulator (default) or the real engine on cpu / cuda")
        add_scenario_flags(r, "run folder to write (default results/<name>/<run-id>)")
        add_format_flag(r)
        add_result_flags(r)
        r.add_argument("--workers", metavar="N",
                       help="simulator: run the sweep's runs as Ray tasks on a local Ray of N "
                       "CPUs (needs loopserve[ray]); results identical to the sequential run; "
                       "Ray's start-up and shutdown cost seconds, so it pays off for sweeps "
                       "that take over ~15 s in one process")
        r.add_argument("--ray-address", metavar="ADDR",
                       help="simulator: run the sweep's runs on the Ray cluster at ADDR")
        r.set_defaults(handler=main, require_sweep=name == "sweep")


def add_format_flag(parser: argparse.ArgumentParser) -> None:
    """``--format parquet|csv``: the record tables' format (``outputs.format``)."""
    parser.add_argument("--format", dest="table_format", metavar="parquet|csv",
                        help="record tables as Parquet (default) or CSV; sets outputs.format")


def format_sets(args: argparse.Namespace) -> list[str]:
    """The ``--set`` overrides with ``--format`` applied; UserError on a bad value."""
    fmt = getattr(args, "table_format", None)
    if fmt is None:
        return list(args.sets)
    if fmt not in FORMATS:
        raise UserError("--format", f"{fmt!r}: use parquet or csv")
    return [*args.sets, f"outputs.format={fmt}"]


def add_result_flags(p: argparse.ArgumentParser) -> None:
    """Register the three flags (defaults: every metric at 50,90,99; the scenario's slo)."""
    p.add_argument("--percentile-metrics", default=DEFAULT_METRICS, metavar="M,M",
                   help=f"vllm_results.json's metrics, of {DEFAULT_METRICS} "
                   f"(default {DEFAULT_METRICS})")
    p.add_argument("--metric-percentiles", default=DEFAULT_PERCENTILES, metavar="P,P",
                   help=f"their percentiles (default {DEFAULT_PERCENTILES})")
    p.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                   help="per-request SLOs for request_goodput: ttft:MS tpot:MS e2el:MS "
                   "(default: the scenario's slo, ttft_p99_ms as ttft and itl_p99_ms as tpot)")


def result_options(args: argparse.Namespace) -> ResultOptions:
    """The parsed flags; UserError naming the flag on a bad value."""
    try:
        return ResultOptions(
            percentile_metrics=parse_metrics(args.percentile_metrics),
            percentiles=parse_percentiles(args.metric_percentiles),
            goodput=None if args.goodput is None else parse_goodput(args.goodput))
    except ValueError as err:
        raise flag_error(err, "--goodput") from None


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Plan, execute, write; UserError on bad input (exit 2 by the CLI). SIGINT and SIGTERM
    end it with nothing written (``loopserve.runs.interrupts``: deferred while runs execute)."""
    with interrupts.immediate():
        return _main(args, argv)


def _main(args: argparse.Namespace, argv: list[str]) -> int:
    started = time.time()
    options = result_options(args)
    scn = load_scenario(args.scenario, format_sets(args))
    if args.require_sweep and not scn.is_sweep:
        raise UserError("sweep", "missing; `loopserve sweep` needs a sweep or variants section "
                        "(or use `loopserve run`)")
    ray = ray_options(args)
    plan = plan_runs(scn, args.target)
    dest = files.run_destination(args.out, RESULTS_ROOT / scn.name, args.target)
    note = unmeasured_note(p.exits for p in plan.points)
    if note is not None:
        print(f"loopserve: note: {note}", file=sys.stderr)
    # Deferred on the simulator only: its compiled driver must not see KeyboardInterrupt; the
    # real engine's loop is Python and stops at once.
    with interrupts.deferred() if plan.target == "sim" else contextlib.nullcontext():
        if ray is None:
            results = execute(plan, progress=not args.no_progress)
        else:  # Ray's modules load only for a sweep that asks for it
            from loopserve.runs.ray_runs import execute_on_ray

            results = execute_on_ray(plan, ray, progress=not args.no_progress)
    report = write_run(dest, plan, results, argv=argv, started_s=started, options=options)
    print(medians_table(dest, plan.reference_point_id, len(plan.points)))
    print(f"report: {report}")
    return 0


def ray_options(args: argparse.Namespace) -> RayOptions | None:
    """``--workers`` / ``--ray-address`` checked before any work: simulator only, not both,
    Ray installed; None to run in this process."""
    if args.workers is None and args.ray_address is None:
        return None
    flag = "--ray-address" if args.ray_address is not None else "--workers"
    if args.workers is not None and args.ray_address is not None:
        raise UserError("--workers", "starts a local Ray; with --ray-address the cluster's "
                        "CPUs are used (give one of the two)")
    if args.target != "sim":
        raise UserError(flag, f"target {args.target} runs one run at a time on its one device; "
                        "drop the flag (Ray runs simulated sweeps only)")
    workers = None if args.workers is None else integer("--workers", args.workers, 1)
    from loopserve.runs.ray_runs import RayOptions, require_ray

    require_ray(flag)
    return RayOptions(workers=workers, address=args.ray_address)


def write_run(dest: Path, plan: Plan, runs: list[RunResult], *, argv: list[str],
              started_s: float, options: ResultOptions | None = None) -> Path:
    """Write every output file into a staging folder, render the report, rename to dest;
    ``options``: vllm_results.json's metrics, percentiles and goodput SLOs. Consumes
    ``runs``: the list is emptied once the files are written, so the report (read from
    those files) renders with a large run's records freed."""
    scn = plan.scenario
    with files.staged_dir(dest) as tmp:
        files.write_scenario(tmp / "scenario.yaml", scn,
                             header=equal_arms.scenario_comment(plan.derived_chunks))
        records.write_records(tmp, runs, scn.outputs.format,
                              tokens=scn.outputs.tokens or plan.target != "sim")
        files.write_json(tmp / "summary.json",
                         {**build_summary(plan, runs), "cost_model": plan.cost_model})
        files.write_json(tmp / "vllm_results.json",
                         vllm_run_results(runs, plan.target, scn.slo, options))
        write_trace(tmp / "trace.json.gz", runs, scn.arms, {plan.reference_point_id})
        timing = [{"arm": r.spec.arm, "point_id": r.spec.point_id, "repeat": r.spec.repeat,
                   "wall_s": round(r.records.wall_s, 6)} for r in runs]
        files.write_json(tmp / "env.json", env_info.collect(
            target=plan.target, hardware=scn.hardware, run_id=dest.name, argv=argv,
            started_s=started_s, run_wall_s=timing,
            exit_model=exit_models({p.point_id: p.exits for p in plan.points}),
            runner=plan.real.info() if plan.real is not None else None,
            cost_model=plan.cost_model,
            cost_models={p.point_id: p.cost_record for p in plan.points},
            extra=_arm_facts(plan)))
        runs.clear()
        write_run_report([load_run(tmp, label=dest.name)], tmp, write_pngs=True)
    return dest / "report.html"


def _arm_facts(plan: Plan) -> dict[str, object]:
    """env.json's ``derived_chunks`` and ``unequal_arms`` (per point id), when there are any."""
    out: dict[str, object] = {}
    if plan.derived_chunks:
        out["derived_chunks"] = {str(p): c for p, c in sorted(plan.derived_chunks.items())}
    unequal = {str(p.point_id): p.unequal_arms for p in plan.points if p.unequal_arms}
    if unequal:
        out["unequal_arms"] = unequal
    return out


def medians_table(run_dir: Path, point_id: int, num_points: int) -> str:
    """The short per-arm table printed at the end of a run."""
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
