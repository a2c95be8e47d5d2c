"""The gpu-check driver and its command line (``python -m tools.gpu``, see ``tools.gpu``):
every stage in order under the budget, then gpu_check.json, summary.txt and the table.
Standard library only."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from tools.gpu import outputs, wheels
from tools.gpu.context import REPO, Check, StageResult
from tools.gpu.proc import NotAvailable, StageFailed
from tools.gpu.stages import RUNNERS, STAGES, StageSpec

FINALIZE_RESERVE_S = 5.0  # kept back from the budget for writing the outputs
MIN_CAP_S = 5.0  # a stage whose cap comes out shorter is skipped


def run_stage(c: Check, spec: StageSpec, later: list[StageSpec]) -> None:
    """Run one stage under its cap (the budget left less the later stages' reserves),
    recording how it ended; a stage's exception never ends the check."""
    fn = RUNNERS[spec.name]
    if not spec.selected(c.only):
        why = "not in --only" if c.only is not None else "runs only with --only"
        c.stages.append(StageResult(spec.name, "skipped", 0.0, why))
        return
    if c.dry and spec.cuda_only:
        c.stages.append(StageResult(spec.name, "skipped", 0.0, spec.cuda_only))
        c.say(f"== {spec.name}: skipped ({spec.cuda_only})")
        return
    left = c.budget_s - (time.monotonic() - c.start) - FINALIZE_RESERVE_S
    reserve = sum(s.reserve for s in later if s.selected(c.only))
    cap = min(spec.cap_cpu if c.dry else spec.cap_cuda, left - reserve)
    if cap < MIN_CAP_S:
        c.stages.append(StageResult(spec.name, "skipped", 0.0, "no time left in budget"))
        c.say(f"== {spec.name}: skipped (no time left in the budget)")
        return
    c.say(f"== {spec.name} (cap {cap:.0f}s)")
    t0 = time.monotonic()
    try:
        status, detail = "ok", fn(c, cap)
    except NotAvailable as err:
        status, detail = "n/a", str(err)
    except StageFailed as err:
        status, detail = "failed", str(err)
    except Exception as err:  # noqa: BLE001 - one stage's bug must not end the check
        status, detail = "failed", f"{type(err).__name__}: {err}"
    result = StageResult(spec.name, status, time.monotonic() - t0, detail)
    c.stages.append(result)
    c.say(f"== {spec.name}: {status} in {result.seconds:.1f}s: {detail}")


def run(c: Check) -> int:
    """Every stage in order, then the outputs and the table; the exit status."""
    c.out.mkdir(parents=True, exist_ok=True)
    log_file = c.log_file = (c.out / "log.txt").open("w")
    c.results.update(device=c.device, date=time.strftime("%Y-%m-%d"),
                     commit=wheels.read_commit(c.wheels_dir), budget_s=c.budget_s,
                     output=str(c.out))
    if sys.version_info[:2] == (3, 12) and any(c.site_dir.glob("*.dist-info")):
        # A rerun with --only on a warm machine: the first run's wheels are still there.
        c.extra_path.append(str(c.site_dir))
    c.say(f"gpu-check on {c.device}{' (DRY RUN)' if c.dry else ''}: commit "
          f"{c.results['commit']}, budget {c.budget_s:.0f}s, results -> {c.out}")
    try:
        for i, spec in enumerate(STAGES):
            run_stage(c, spec, list(STAGES[i + 1:]))
        return finish(c)
    finally:
        log_file.close()
        shutil.rmtree(c.scratch, ignore_errors=True)


def finish(c: Check) -> int:
    """Write gpu_check.json and summary.txt, check the output limits, print the table."""
    c.results["stages"] = [vars(s) for s in c.stages]
    c.results["total_s"] = round(time.monotonic() - c.start, 1)
    table = outputs.final_table(c.results)
    (c.out / "gpu_check.json").write_text(
        json.dumps(c.results, indent=2, default=str) + "\n")
    (c.out / "summary.txt").write_text(table + "\n")
    failed = [s.name for s in c.stages if s.status == "failed"]
    c.say(f"results in {c.out} ({c.results['total_s']}s); "
          f"{'FAILED: ' + ', '.join(failed) if failed else 'no stage failed'}")
    c.log(table)
    problems = outputs.limit_problems(c.out)
    for p in problems:
        print(f"output limit: {p}", flush=True)
    print(table, flush=True)
    return 1 if failed or problems else 0


def default_out(device: str) -> Path:
    """$OUT when set; else results/gpu/<date>/ (a fresh suffix when taken), or
    results/gpu-dryrun/ (emptied) for the dry run."""
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"])
    if device != "cuda":
        out = REPO / "results" / "gpu-dryrun"
        shutil.rmtree(out, ignore_errors=True)
        return out
    base = REPO / "results" / "gpu" / time.strftime("%Y-%m-%d")
    out, n = base, 1
    while out.exists() and any(out.iterdir()):
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gpu",
                                 description="the one prepared script for a lent GPU")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda on the GPU machine; cpu for the dry run (tiny model)")
    ap.add_argument("--out", type=Path, help="results folder (default $OUT, else results/gpu/"
                    "<date>/, or results/gpu-dryrun/ for --device cpu)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="total time budget (default 480 on cuda, 280 on cpu)")
    ap.add_argument("--only", help="comma-separated stages to run (a rerun of some), from: "
                    + ",".join(s.name for s in STAGES))
    ap.add_argument("--wheels", type=Path, default=wheels.WHEEL_DIR,
                    help="folder of carried wheels (default .whl/)")
    ap.add_argument("--site", type=Path, default=None,
                    help="install target for the wheels (default /tmp/site on cuda)")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    unknown = (only or set()) - {s.name for s in STAGES}
    if unknown:
        ap.error(f"--only: unknown stage(s) {', '.join(sorted(unknown))}")
    budget = args.budget_s or (480.0 if args.device == "cuda" else 280.0)
    need = FINALIZE_RESERVE_S + sum(s.reserve for s in STAGES
                                    if s.selected(only))
    if budget < need:
        ap.error(f"--budget-s: {budget:.0f}s is less than the {need:.0f}s the selected stages "
                 "reserve; raise it or run fewer stages with --only")
    check = Check(
        device=args.device,
        out=(args.out or default_out(args.device)).resolve(),
        budget_s=budget,
        wheels_dir=args.wheels,
        site_dir=args.site or wheels.SITE_DIR,
        only=only,
    )
    if args.device != "cuda" and args.site is None:
        check.site_dir = check.scratch / "site"
    return run(check)


if __name__ == "__main__":
    sys.exit(main())
