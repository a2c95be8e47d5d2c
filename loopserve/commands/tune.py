"""``loopserve tune``: the configuration of the scenario's ``tune:`` space that serves the most
under an SLO, found in simulation.

    loopserve tune SCENARIO [--slo ...] [--goodput-fraction F] [--goodput KEY:MS ...]
                   [--objective capacity|capacity_per_gpu] [--budget N] [--top K]
                   [--workers N | --ray-address ADDR] [--verify cpu|cuda] [--exhaustive]
                   [--tolerance 0.05] [--start-rate R] [--out DIR] [--set key=value ...]

Every configuration (``loopserve.tune.space``) gets ``loopserve capacity``'s search, in rounds
with early stopping (``loopserve.tune.search``); the probes run here or as Ray tasks and are
stored as they finish, so the same command with the same ``--out`` resumes an interrupted
search. The folder holds ``tune.json``, ``tune.csv``, ``best.yaml``, ``pareto.png``,
``report.md`` and ``env.json`` (``verify.json`` with ``--verify``); in simulation the same
scenario and seed give the same tune.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from loopserve.commands import command_help
from loopserve.commands.args import add_scenario_flags, integer
from loopserve.commands.capacity import (
    FACTOR,
    MAX_STEPS,
    add_slo_flags,
    criterion,
    start_rate,
    tolerance_flag,
)
from loopserve.commands.run import ray_options
from loopserve.errors import UserError
from loopserve.outputs import files
from loopserve.runs import interrupts
from loopserve.runs.interrupts import Interrupted
from loopserve.schema import load_scenario
from loopserve.tune import outputs
from loopserve.tune.gpus import num_gpus
from loopserve.tune.rounds import round_runner
from loopserve.tune.search import Settings, Track, search
from loopserve.tune.space import expand
from loopserve.tune.store import ProbeStore

RESULTS_ROOT = Path("results")
OBJECTIVES = ("capacity", "capacity_per_gpu")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tune", help=command_help("tune"))
    p.add_argument("scenario", help="scenario YAML file with a poisson or gamma workload and "
                   "a tune section (dotted field -> values)")
    add_slo_flags(p)
    p.add_argument("--objective", default="capacity", choices=OBJECTIVES,
                   help="rank by capacity (req/s) or capacity per GPU")
    p.add_argument("--budget", metavar="N", help="at most N probes in all (a probe: one rate of "
                   "one configuration, the scenario's repeats); searches left are 'budget'")
    p.add_argument("--top", metavar="K", default="1", help="early stopping keeps the best K "
                   "exact; --verify checks them (default 1)")
    p.add_argument("--exhaustive", action="store_true", help="no early stopping: every "
                   "configuration searched to the end")
    p.add_argument("--workers", metavar="N", help="run probes as Ray tasks on a local Ray of N "
                   "CPUs (needs loopserve[ray]); same result as in one process")
    p.add_argument("--ray-address", metavar="ADDR", help="run probes on the Ray cluster at ADDR")
    p.add_argument("--verify", choices=("cpu", "cuda"), help="run the best K on the real "
                   "engine at their predicted capacity and 0.8x of it")
    p.add_argument("--tolerance", default="0.05", help="relative width of the final bracket")
    p.add_argument("--start-rate", help="first rate probed (default: the workload's rate)")
    add_scenario_flags(p, "tune folder (default results/<name>/<run-id>); an interrupted "
                       "search's folder resumes it")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Check every input, search, write the folder, print the report section."""
    with interrupts.immediate():
        return _main(args, argv)


def _settings(args: argparse.Namespace, start: float) -> Settings:
    tolerance = tolerance_flag(args)
    budget = None if args.budget is None else integer("--budget", args.budget, 0)
    if budget == 0:
        raise UserError("--budget", "must be at least 1 probe (or leave it out: no limit)")
    return Settings(start=start, tolerance=tolerance, factor=FACTOR, max_steps=MAX_STEPS,
                    top=integer("--top", args.top, 1), prune=not args.exhaustive,
                    budget=budget)


def _main(args: argparse.Namespace, argv: list[str]) -> int:
    started = time.time()
    scn = load_scenario(args.scenario, args.sets)
    start = start_rate(args, scn)
    settings = _settings(args, start)
    crit = criterion(args, scn)
    ray = ray_options(argparse.Namespace(workers=args.workers, ray_address=args.ray_address,
                                         target="sim"))
    if args.verify is not None:
        from loopserve.tune.verify import check_verify
        check_verify(args.verify)
    configs = expand(scn, start)  # every configuration checked before any run
    dest = Path(args.out) if args.out else RESULTS_ROOT / scn.name / files.new_run_id(
        "tune-sim", RESULTS_ROOT / scn.name)
    files.check_writable(dest, "--out")
    store = ProbeStore(dest, {"scenario": scn.model_dump(mode="json"), "target": "sim",
                              "criterion": [crit.limits, crit.goodput_fraction, crit.goodput]})
    tracks = [Track(c, num_gpus(c.scenario) if c.scenario else 1) for c in configs
              if c.rejected is None]
    try:
        with interrupts.deferred(), round_runner(crit, store, ray,
                                                 progress=not args.no_progress) as run_round:
            search(tracks, settings, run_round, store.get)
    except Interrupted as sig:
        print(f"loopserve: interrupted by {sig}; {len(store.kept)} probes kept in {dest}; "
              f"rerun with --out {dest} to resume", file=sys.stderr)
        return sig.exit_status
    doc = outputs.document(scn, configs, tracks, crit, settings, args.objective)
    if args.verify is not None:
        from loopserve.tune.verify import verify
        doc["verify"] = verify(scn, doc, args.verify, settings.top, crit,
                               progress=not args.no_progress)
    outputs.write(dest, scn, doc, argv=argv, started=started)
    print(outputs.report_text(doc))
    print(f"tune: {dest / 'tune.json'}")
    return 0
