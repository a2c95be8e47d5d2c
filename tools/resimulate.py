"""A fidelity run's measured medians against simulations with a part of its profile removed.

``python -m tools.resimulate FOLDER... [--drop after_idle]`` reads each ``loopserve fidelity``
output folder (its resolved ``scenario.yaml`` names the profile; ``fidelity.json`` holds the
measured medians and the runs' own speed) and simulates it again, with the profile as it is
and with each ``--drop`` part left out, at the profile's speed and at the runs' own speed
(``loopserve.fidelity.speed``). It prints the ITL p50 and TTFT p50 errors of each against the
same measured runs: what that part of the cost model adds, with the machine held fixed.
Output is one JSON object, then a table.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from loopserve.fidelity.compare import errors_against
from loopserve.fidelity.speed import scaled_profile
from loopserve.fidelity.world import run_sim
from loopserve.runs.plan import plan_runs
from loopserve.schema import load_scenario
from sim.cost.calibrated import CalibratedCost
from sim.cost.profile import Profile

PARTS = ("after_idle", "after_idle.later", "step_gap", "signals", "finalize")


def _without(profile: Profile, part: str) -> Profile:
    if part == "after_idle.later":
        if profile.after_idle is None:
            return profile
        return profile.model_copy(update={
            "after_idle": profile.after_idle.model_copy(update={"later": []})})
    return profile.model_copy(update={part: None})


def resimulate(folder: Path, drops: list[str]) -> dict[str, Any]:
    """Per variant (``as is``, ``without <part>``) and speed (``profile``, ``run``): per arm,
    the simulated and measured ITL p50 / TTFT p50 and their errors."""
    doc = json.loads((folder / "fidelity.json").read_text())
    plan = plan_runs(load_scenario(folder / "scenario.yaml"), "sim")
    cost = next(iter(plan.costs.values()))
    assert isinstance(cost, CalibratedCost), "a fidelity folder's cost is its profile"
    ratio = doc["at_run_speed"]["step_time_ratio"] or 1.0
    variants: dict[str, Profile] = {"as is": cost.profile}
    for part in drops:
        variants[f"without {part}"] = _without(cost.profile, part)
    measured = {arm: {m: e["measured"] for m, e in row.items()} for arm, row in doc["arms"].items()}
    out: dict[str, Any] = {"folder": str(folder), "run_speed": ratio, "variants": {}}
    for name, prof in variants.items():
        for speed, factor in (("profile", 1.0), ("run", ratio)):
            c = CalibratedCost(scaled_profile(prof, factor))
            runs = run_sim(replace(plan, costs={k: c for k in plan.costs}), progress=False)
            errors = errors_against(plan, runs, measured)
            out["variants"][f"{name} @ {speed} speed"] = {
                arm: {k: row[k] for k in ("itl_p50_ms", "ttft_p50_ms")}
                for arm, row in errors.items()}
    return out


def table(doc: dict[str, Any]) -> str:
    """One line per variant: ITL p50 / TTFT p50 error per arm."""
    lines = [f"{doc['folder']} (runs' own speed x{doc['run_speed']:.3f})"]
    for name, arms in doc["variants"].items():
        cells = [f"{arm} ITL {100 * r['itl_p50_ms']['rel_error']:+.1f}% TTFT "
                 f"{100 * r['ttft_p50_ms']['rel_error']:+.1f}%" for arm, r in arms.items()]
        lines.append(f"  {name:<34} " + " | ".join(cells))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="loopserve fidelity output folders")
    ap.add_argument("--drop", action="append", default=[], choices=PARTS,
                    help="a profile part to leave out (repeatable)")
    args = ap.parse_args()
    docs = [resimulate(f, args.drop) for f in args.folders]
    print(json.dumps(docs))
    for d in docs:
        print(table(d))


if __name__ == "__main__":
    main()
