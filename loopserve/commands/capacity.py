"""``loopserve capacity``: per arm, the highest request rate whose run meets the SLO.

    loopserve capacity SCENARIO [--slo ttft_p99_ms=200,itl_p99_ms=10] [--goodput-fraction 0.9]
                       [--goodput ttft:MS tpot:MS e2el:MS] [--target sim|cpu|cuda]
                       [--tolerance 0.05] [--start-rate R] [--out DIR] [--set key=value ...]

The scenario's workload must have a rate (poisson or gamma); its sweep and variants are not
used. Each arm is searched on its own (``loopserve.runs.capacity``: bracketing from the
workload's rate, or ``--start-rate``, by factors of 2, then bisection to ``--tolerance``),
every probe running the scenario's repeats of that arm (``loopserve.runs.capacity_probe``:
the SLO holds on the median over them). ``--slo`` defaults to the scenario's ``slo``. The run
folder (staged, renamed when complete) holds ``capacity.json``, ``capacity.csv`` (one row
per arm), ``probes.csv`` (every probe), ``capacity.png``, ``scenario.yaml`` and ``env.json``.
In simulation the same scenario and seed give the same bytes (env.json aside).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from loopserve.commands import command_help
from loopserve.commands.args import add_scenario_flags, flag_error, number, parse_goodput
from loopserve.errors import UserError
from loopserve.outputs import env_info, files
from loopserve.outputs.vllm_results import slo_goodput
from loopserve.plan import TARGETS, plan_runs
from loopserve.report.figures import capacity_png
from loopserve.runs import interrupts
from loopserve.runs.capacity import search_capacity
from loopserve.runs.capacity_probe import (
    Criterion,
    ProbeRow,
    at_rate,
    base_scenario,
    check_rate_workload,
    parse_slo,
    prober,
)
from loopserve.schema import load_scenario
from loopserve.schema.scenario import Scenario
from loopserve.workloads.base import MIN_REQUEST_RATE

RESULTS_ROOT = Path("results")
FACTOR = 2.0
MAX_STEPS = 10  # bracketing reaches start x 2**10 or start / 2**10


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("capacity", help=command_help("capacity"))
    p.add_argument("scenario", help="scenario YAML file with a poisson or gamma workload")
    add_slo_flags(p)
    p.add_argument("--target", default="sim", choices=TARGETS)
    p.add_argument("--tolerance", default="0.05", help="relative width of the final bracket")
    p.add_argument("--start-rate", help="first rate probed (default: the workload's rate)")
    add_scenario_flags(p, "run folder to write (default results/<name>/<run-id>)")
    p.set_defaults(handler=main)


def add_slo_flags(p: argparse.ArgumentParser) -> None:
    """The criterion's flags (``criterion`` reads them), shared with ``loopserve tune``."""
    p.add_argument("--slo", help="limits on median metrics, e.g. ttft_p99_ms=200,itl_p99_ms=10 "
                   "(default: the scenario's slo)")
    p.add_argument("--goodput-fraction", metavar="F", help="also require request_goodput / "
                   "request_throughput >= F (0 < F <= 1)")
    p.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="per-request SLOs behind "
                   "--goodput-fraction: ttft:MS tpot:MS e2el:MS (default: the scenario's slo)")


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Check every input, search each arm, write the folder, print the table."""
    with interrupts.immediate():
        return _main(args, argv)


def criterion(args: argparse.Namespace, scn: Scenario) -> Criterion:
    """The SLO from the flags and the scenario; UserError naming the flag on bad input."""
    frac = None if args.goodput_fraction is None else number(
        "--goodput-fraction", args.goodput_fraction, 0)
    if frac is not None and not 0 < frac <= 1:
        raise UserError("--goodput-fraction", f"must be in (0, 1], got {args.goodput_fraction}")
    if args.slo is not None:
        limits = parse_slo(args.slo)
    elif frac is None and scn.slo is not None:
        limits = {k: v for k, v in scn.slo.model_dump().items() if v is not None}
    else:
        limits = {}
    if not limits and frac is None:
        raise UserError("--slo", "required (e.g. --slo ttft_p99_ms=200,itl_p99_ms=10) when "
                        "the scenario has no slo and no --goodput-fraction is given")
    try:
        goodput = parse_goodput(args.goodput) if args.goodput else slo_goodput(scn.slo)
    except ValueError as err:
        raise flag_error(err, "--goodput") from None
    if frac is not None and not goodput:
        raise UserError("--goodput", "--goodput-fraction needs per-request SLOs: --goodput "
                        "ttft:MS tpot:MS e2el:MS, or an slo in the scenario")
    return Criterion(limits, frac, goodput if frac is not None else None)


def tolerance_flag(args: argparse.Namespace) -> float:
    """``--tolerance``, the relative width of the final bracket, in (0, 1)."""
    tolerance = number("--tolerance", args.tolerance, 0)
    if not 0 < tolerance < 1:
        raise UserError("--tolerance", f"must be in (0, 1), e.g. 0.05; got {args.tolerance}")
    return tolerance


def start_rate(args: argparse.Namespace, scn: Scenario) -> float:
    """The first rate probed: ``--start-rate``, else the scenario's workload rate."""
    start = check_rate_workload(scn)
    if args.start_rate is not None:
        start = number("--start-rate", args.start_rate, 0)
        if not start > 0:
            raise UserError("--start-rate", f"must be > 0, got {args.start_rate}")
    return start


def _main(args: argparse.Namespace, argv: list[str]) -> int:
    started = time.time()
    tolerance = tolerance_flag(args)
    scn = load_scenario(args.scenario, args.sets)
    start = start_rate(args, scn)
    crit = criterion(args, scn)
    for arm in scn.arms:  # every input checked before any run
        plan_runs(at_rate(scn, arm, start), args.target)
    dest = files.run_destination(args.out, RESULTS_ROOT / scn.name, f"capacity-{args.target}")
    if scn.is_sweep:
        print("capacity: the scenario's sweep/variants are not used; each arm is searched at "
              "its base values", file=sys.stderr)
    wall: dict[str, float] = {}
    arms = []
    with interrupts.deferred() if args.target == "sim" else contextlib.nullcontext():
        for arm in scn.arms:
            t0 = time.time()
            arms.append(_search_arm(scn, arm, args.target, crit, start, tolerance,
                                    progress=not args.no_progress))
            wall[arm] = round(time.time() - t0, 3)
    doc = {"scenario": scn.name, "target": args.target, "workload": scn.workload.kind,
           "repeats": scn.repeats, "seed": scn.seed,
           "criterion": {"slo": crit.limits, "goodput_fraction": crit.goodput_fraction,
                         "goodput": crit.goodput},
           "tolerance": tolerance, "start_rate": start, "factor": FACTOR,
           "max_steps": MAX_STEPS, "arms": arms}
    _write(dest, base_scenario(scn), doc, crit, argv=argv, started=started, wall=wall)
    print(capacity_table(doc, crit))
    print(f"capacity: {dest / 'capacity.json'}")
    return 0


def _search_arm(scn: Scenario, arm: str, target: str, crit: Criterion, start: float,
                tolerance: float, *, progress: bool) -> dict[str, Any]:
    probe = prober(scn, arm, target, crit)
    rows: list[ProbeRow] = []
    with tqdm(desc=f"capacity {arm} [{target}]", unit="probe", file=sys.stderr,
              disable=not progress, leave=False) as bar:
        def meets(rate: float) -> bool:
            interrupts.check()
            bar.set_postfix_str(f"{rate:.4g} req/s", refresh=False)
            rows.append(probe(rate))
            bar.update()
            return rows[-1].meets

        found = search_capacity(meets, start, tolerance=tolerance, factor=FACTOR,
                                max_steps=MAX_STEPS, min_rate=MIN_REQUEST_RATE)
    probes = [{"rate": r.rate, "meets": r.meets, "valid": r.valid, **r.values,
               "reason": r.reason} for r in rows]
    at_cap = next((p for p in probes if p["rate"] == found.low), None)
    return {"arm": arm, "capacity_req_s": found.capacity, "status": found.status,
            "low_req_s": found.low, "high_req_s": found.high, "num_probes": len(probes),
            "at_capacity": {c: at_cap.get(c) for c in crit.columns} if at_cap else None,
            "probes": probes, "search": [asdict(p) for p in found.probes]}


def _write(dest: Path, scn: Scenario, doc: dict[str, Any], crit: Criterion, *,
           argv: list[str], started: float, wall: dict[str, float]) -> None:
    cols = crit.columns
    with files.staged_dir(dest) as tmp:
        files.write_scenario(tmp / "scenario.yaml", scn)
        files.write_json(tmp / "capacity.json", doc)
        files.write_csv(tmp / "capacity.csv",
                        ["arm", "capacity_req_s", "status", "low_req_s", "high_req_s",
                         "num_probes", *(f"{c}_at_capacity" for c in cols)],
                        [[a["arm"], a["capacity_req_s"], a["status"], a["low_req_s"],
                          a["high_req_s"], a["num_probes"],
                          *((a["at_capacity"] or {}).get(c) for c in cols)]
                         for a in doc["arms"]])
        files.write_csv(tmp / "probes.csv", ["arm", "probe", "rate", "meets", "valid", *cols,
                                             "reason"],
                        [[a["arm"], i, p["rate"], p["meets"], p["valid"],
                          *(p.get(c) for c in cols), p["reason"]]
                         for a in doc["arms"] for i, p in enumerate(a["probes"])])
        (tmp / "capacity.png").write_bytes(
            capacity_png(doc["arms"], crit.limits, crit.goodput_fraction))
        files.write_json(tmp / "env.json", env_info.collect(
            target=doc["target"], hardware=scn.hardware, run_id=dest.name, argv=argv,
            started_s=started, run_wall_s=[{"arm": a, "wall_s": w} for a, w in wall.items()]))


def capacity_table(doc: dict[str, Any], crit: Criterion) -> str:
    """The per-arm table printed at the end."""
    cols = crit.columns
    head = f"{'arm':<10} {'capacity req/s':>14}  {'bracket (req/s)':<19} " + " ".join(
        f"{c:>16}" for c in cols) + "  status"
    lines = [head, "-" * len(head)]
    for a in doc["arms"]:
        cap = "-" if a["capacity_req_s"] is None else f"{a['capacity_req_s']:.4g}"
        lo = "-" if a["low_req_s"] is None else f"{a['low_req_s']:.4g}"
        hi = "-" if a["high_req_s"] is None else f"{a['high_req_s']:.4g}"
        vals = [(a["at_capacity"] or {}).get(c) for c in cols]
        cells = " ".join(f"{v:>16.4g}" if v is not None else f"{'-':>16}" for v in vals)
        lines.append(f"{a['arm']:<10} {cap:>14}  {f'[{lo}, {hi})':<19} {cells}  {a['status']}")
    crit_text = ", ".join(f"{k} <= {v:g}" for k, v in crit.limits.items())
    if crit.goodput_fraction is not None:
        crit_text += (", " if crit_text else "") + f"goodput >= {crit.goodput_fraction:g}"
    return (f"capacity per arm ({doc['target']}, {doc['workload']} arrivals, median of "
            f"{doc['repeats']} repeats; {crit_text}; tolerance {doc['tolerance']:g}; "
            "values at capacity)\n" + "\n".join(lines))
