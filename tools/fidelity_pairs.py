"""What adaptive exits add to the simulator's timing error, read apart from the machine's drift.

``python -m tools.fidelity_pairs SCENARIO... --profile P --target cpu [--rounds 4]
[--repeats 3] --out DIR`` runs ``loopserve fidelity`` on each adaptive-exit SCENARIO and on
its fixed-exit twin (the same scenario with ``exit.mode=fixed``: the same workload, scheduler
and calibration, every token through all loops), one pair after the other, round after round
(fixed first in even rounds, adaptive first in odd ones). On a shared machine the speed
moves by 10-20% within minutes, and that shifts every error of a run alike; a fixed-exit run
next to the adaptive one sees nearly the same machine. So
the number to read is the difference, adaptive error minus fixed error, per arm and metric:
what the exit model adds. Issue 17's target is that the adaptive errors stay within the
same 10% the fixed-exit runs reach.

Each run's folder stays under DIR (``ROUND-NAME-fixed``, ``ROUND-NAME-adaptive``);
``pairs.json`` holds every error and the medians over rounds, and the markdown tables go to
stdout: the errors, and per step kind measured / predicted time in each twin (prompt steps do
the same work in both, so where those differ the machine differed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from statistics import median
from typing import Any

from loopserve.outputs.files import atomic_write

METRICS = ("itl_p50_ms", "ttft_p50_ms")
KINDS = ("fixed", "adaptive")


def _fidelity(scenario: str, profile: str, target: str, repeats: int, out: Path,
              fixed: bool) -> dict[str, Any]:
    sets = ["--set", f"repeats={repeats}"] + (["--set", "exit.mode=fixed"] if fixed else [])
    cmd = [sys.executable, "-m", "loopserve", "fidelity", scenario, "--profile", profile,
           "--target", target, "--no-progress", "--out", str(out), *sets]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    doc: dict[str, Any] = json.loads((out / "fidelity.json").read_text())
    return doc


def _errors(doc: dict[str, Any]) -> dict[str, Any]:
    """Per arm and metric the relative error; per step kind measured / predicted time (the
    prompt kinds do the same work in both twins, so they gauge the machine during the run);
    the probes' slowdown vs calibration."""
    arms = {arm: {m: row[m]["rel_error"] for m in METRICS} for arm, row in doc["arms"].items()}
    speed = (doc.get("at_run_speed") or {}).get("arms") or {}
    at_speed = {arm: {m: row[m]["rel_error"] for m in METRICS} for arm, row in speed.items()}
    ratio = {k: v["measured_s"] / v["predicted_s"]
             for k, v in doc["step_errors"]["by_kind"].items() if v["predicted_s"]}
    return {"arms": arms, "at_run_speed": at_speed or None, "step_ratio": ratio,
            "slowdown": doc["machine"]["slowdown_vs_calibration"]}


def run_pairs(scenarios: list[str], profile: str, target: str, rounds: int, repeats: int,
              out: Path) -> dict[str, Any]:
    """Every run's errors and, per scenario, arm and metric, the medians over rounds."""
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in scenarios}
    for k in range(rounds):
        for s in scenarios:
            name = Path(s).stem
            # fixed first in even rounds, adaptive first in odd ones: an order effect (the
            # machine warming or cooling over a pair) cancels over an even number of rounds
            order = KINDS if k % 2 == 0 else KINDS[::-1]
            pair = {kind: _errors(_fidelity(s, profile, target, repeats,
                                            out / f"{k}-{name}-{kind}", kind == "fixed"))
                    for kind in order}
            runs[s].append(pair)
            print(f"round {k} {name}: done", file=sys.stderr)
    summary: dict[str, Any] = {}
    for s, pairs in runs.items():
        arms = pairs[0]["fixed"]["arms"]
        summary[s] = {arm: {m: {
            "fixed": median(p["fixed"]["arms"][arm][m] for p in pairs),
            "adaptive": median(p["adaptive"]["arms"][arm][m] for p in pairs),
            "adaptive_minus_fixed": median(p["adaptive"]["arms"][arm][m]
                                           - p["fixed"]["arms"][arm][m] for p in pairs),
            **({f"{kind}_at_run_speed": median(p[kind]["at_run_speed"][arm][m] for p in pairs)
                for kind in KINDS} if all(p[k]["at_run_speed"] for p in pairs for k in KINDS)
               else {}),
        } for m in METRICS} for arm in arms}
        kinds = sorted(set(pairs[0]["fixed"]["step_ratio"]) & set(pairs[0]["adaptive"]["step_ratio"]))
        summary[s]["step_ratio"] = {k: {kind: median(p[kind]["step_ratio"][k] for p in pairs)
                                        for kind in KINDS} for k in kinds}
    return {"profile": profile, "target": target, "rounds": rounds, "repeats": repeats,
            "runs": runs, "median": summary}


def markdown(doc: dict[str, Any]) -> str:
    """One row per scenario, arm and metric: medians over rounds, in percent."""
    lines = ["| scenario | arm | metric | fixed | adaptive | adaptive - fixed | at the runs' "
             "own speed: fixed / adaptive |", "|---|---|---|---|---|---|---|"]
    for s, arms in doc["median"].items():
        for arm, metrics in arms.items():
            if arm == "step_ratio":
                continue
            for m, v in metrics.items():
                lines.append(f"| {Path(s).stem} | {arm} | {m} | {100 * v['fixed']:+.1f}% | "
                             f"{100 * v['adaptive']:+.1f}% | "
                             f"{100 * v['adaptive_minus_fixed']:+.1f} pp | "
                             + (f"{100 * v['fixed_at_run_speed']:+.1f}% / "
                                f"{100 * v['adaptive_at_run_speed']:+.1f}% |"
                                if "fixed_at_run_speed" in v else "- |"))
    lines += ["", "| scenario | step kind | measured / predicted, fixed | adaptive |",
              "|---|---|---|---|"]
    for s, arms in doc["median"].items():
        for k, v in arms["step_ratio"].items():
            lines.append(f"| {Path(s).stem} | {k} | x{v['fixed']:.3f} | x{v['adaptive']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", nargs="+", help="adaptive-exit scenario YAML files")
    ap.add_argument("--profile", required=True, help="calibrated cost profile JSON")
    ap.add_argument("--target", default="cpu", help="cpu | cuda")
    ap.add_argument("--rounds", type=int, default=4, help="fixed/adaptive pairs per scenario")
    ap.add_argument("--repeats", type=int, default=3, help="fidelity repeats per run")
    ap.add_argument("--out", type=Path, required=True, help="new folder for the runs")
    args = ap.parse_args()
    if args.out.exists():
        ap.error(f"--out {args.out} exists; give a new folder")
    doc = run_pairs(args.scenario, args.profile, args.target, args.rounds, args.repeats,
                    args.out)
    atomic_write(args.out / "pairs.json", json.dumps(doc, indent=2) + "\n")
    print(markdown(doc))


if __name__ == "__main__":
    main()
