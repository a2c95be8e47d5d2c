"""Exit depths from prompts the simulator has not seen, against a workload's measured exits.

``python -m tools.exit_tv SCENARIO --measured OWN.exits.json --profile P.exits.json [...]
[--repeats 8] [--thresholds 0.5,0.6,0.7,0.8,0.9]`` simulates SCENARIO's workload (atomic arm;
exits do not depend on the schedule) at each ``ouro`` threshold over ``--repeats`` repeat
seeds, once from each exit profile:

- ``--measured``: a profile of the workload's own requests (``loopserve exit-profile
  --scenario SCENARIO --repeats N`` with the thresholds as regimes). Its replay takes, token
  for token, the exits the real runner took (the measurement checks each row against the
  runner's depth; ``tests/loopserve/test_exit_regime.py`` checks the replay against real runs), so it
  stands for the measured runs here;
- each ``--profile``: measured on other prompts (``--independent`` draws, or generated ones).

For each it prints the depth fractions and the total-variation distance (TV) to the measured
exits. It also prints the measured requests' own sampling noise: the TV between the measured
distribution and bootstrap resamples of its requests (p50 / p95,
``loopserve.fidelity.exits.request_noise``), and the TV between two independent resamples:
what two unbiased samples of that many requests differ by, the reference for a profile of
other prompts of the same size, and the standard deviation of the requests' mean loops on
each side (how unlike the requests are; ``--draw token`` shows it shrink). Output is one JSON
object, and with ``--markdown`` a table too.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from loopserve.fidelity.exits import EXIT_TV_LIMIT, depth_fractions, request_loops, request_noise
from loopserve.fidelity.world import WorldRun, run_sim
from loopserve.runs.plan import plan_runs
from loopserve.schema import load_scenario
from sim.exit_profile import tv_distance


def _simulate(scenario: str | Path, profile: Path, threshold: float, repeats: int,
              draw: str = "request") -> tuple[list[WorldRun], int]:
    sets = [f"exit.profile={profile.resolve()}", f"exit.exit_threshold={threshold}",
            "exit.mode=ouro", f"exit.draw={draw}", f"repeats={repeats}", "arms=[atomic]"]
    plan = plan_runs(load_scenario(scenario, sets), "sim")
    return run_sim(plan, progress=False), plan.shape.num_depths


def _fractions(runs: list[WorldRun], num_depths: int) -> list[float]:
    return [round(f, 4) for f in depth_fractions(runs, num_depths)]


def compare(scenario: str | Path, measured: Path, profiles: list[Path],
            thresholds: list[float], repeats: int, draw: str = "request") -> dict[str, Any]:
    """Per threshold: the measured fractions, their request noise and spread of per-request
    mean loops, and each profile's simulated fractions, TV and spread (rows drawn ``draw``)."""
    out: dict[str, Any] = {"scenario": str(scenario), "measured": str(measured), "repeats": repeats,
                           "tv_limit": EXIT_TV_LIMIT, "thresholds": {}}
    for th in thresholds:
        ref, num_depths = _simulate(scenario, measured, th, repeats)
        want = _fractions(ref, num_depths)
        row: dict[str, Any] = {"measured": want, "noise": request_noise(ref, num_depths),
                               "request_loops": request_loops(ref, num_depths),
                               "two_sample": request_noise(ref, num_depths, two_sample=True),
                               "profiles": {}}
        for p in profiles:
            runs = _simulate(scenario, p, th, repeats, draw)[0]
            got = _fractions(runs, num_depths)
            row["profiles"][p.name] = {"fractions": got, "tv": round(tv_distance(got, want), 4),
                                       "request_loops": request_loops(runs, num_depths)}
        out["thresholds"][f"{th:g}"] = row
    return out


def markdown(doc: dict[str, Any]) -> str:
    """The result as a markdown table (one row per threshold)."""
    names = list(next(iter(doc["thresholds"].values()))["profiles"])
    head = ["threshold", "measured (1/2/3/4 loops, %)", "noise p50 / p95",
            "two samples p50 / p95", *names, "per-request sd: measured", *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for th, row in doc["thresholds"].items():
        n = row["noise"]
        cells = [th, "/".join(f"{100 * f:.1f}" for f in row["measured"]),
                 f"{n['tv_p50']:.3f} / {n['tv_p95']:.3f} ({n['num_requests']} requests)",
                 f"{row['two_sample']['tv_p50']:.3f} / {row['two_sample']['tv_p95']:.3f}"]
        cells += [f"{row['profiles'][k]['tv']:.3f}" for k in names]
        cells += [f"{row['request_loops']['sd']}"]
        cells += [f"{row['profiles'][k]['request_loops']['sd']}" for k in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--measured", type=Path, required=True,
                    help="exit profile of the scenario's own requests (exit-profile --scenario)")
    ap.add_argument("--profile", type=Path, nargs="+", required=True,
                    help="exit profiles measured on other prompts")
    ap.add_argument("--repeats", type=int, default=8, help="repeat seeds to simulate")
    ap.add_argument("--thresholds", default="0.5,0.6,0.7,0.8,0.9",
                    help="ouro thresholds, comma-separated")
    ap.add_argument("--draw", choices=["request", "token"], default="request",
                    help="exit.draw for the --profile simulations (the measured side "
                         "replays its own rows either way)")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table too")
    args = ap.parse_args()
    doc = compare(args.scenario, args.measured, args.profile,
                  [float(t) for t in args.thresholds.split(",")], args.repeats, args.draw)
    print(json.dumps(doc))
    if args.markdown:
        print(markdown(doc))


if __name__ == "__main__":
    main()
