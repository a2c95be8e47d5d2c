"""``loopserve tune --verify cpu|cuda``: did the recommendation hold on the real engine?

The best K configurations run on the real engine at their predicted capacity and at 0.8x of
it, every repeat of every (configuration, rate) before the next repeat (repeat r of each in
turn, as fidelity interleaves its runs: the machine's drift spreads over all of them, and
repeat r uses the simulation's seed for r). Each (configuration, rate) is judged by the
criterion as the probes are, and its goodput fraction (request_goodput /
request_throughput, per-request SLOs from ``--goodput`` or the scenario's slo) reported beside
the simulation's at the same rate. The engine is built once per model and runner settings.
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm

from loopserve.outputs.vllm_results import slo_goodput
from loopserve.plan import Plan, plan_runs
from loopserve.runs import interrupts
from loopserve.runs.capacity_probe import Criterion, at_rate, judge
from loopserve.runs.loop import run_checked, target_of
from loopserve.schema.scenario import Scenario
from loopserve.stats.metrics import RunResult
from loopserve.targets import Target
from loopserve.targets.load import check_real
from loopserve.tune.probe import run_probe
from loopserve.tune.space import configure

FACTORS = (1.0, 0.8)
GOODPUT_FLOOR = 1e-12  # a fraction criterion every run passes: only its value is wanted


def check_verify(target: str) -> None:
    """The real engine and ``target`` device are there (before any simulation)."""
    check_real(target)


def _goodput_crit(crit: Criterion, scn: Scenario) -> Criterion | None:
    goodput = crit.goodput or slo_goodput(scn.slo)
    return Criterion({}, GOODPUT_FLOOR, goodput) if goodput else None


def verify(scn: Scenario, doc: dict[str, Any], target: str, top: int, crit: Criterion, *,
           progress: bool = True) -> list[dict[str, Any]]:
    """One row per (configuration, rate): predicted and measured SLO values, whether each
    met the criterion, and the goodput fractions."""
    by_id = {e["config_id"]: e for e in doc["configurations"]}
    chosen = [by_id[c] for c in doc["summary"]["ranking"][:top]]
    cells: list[tuple[dict[str, Any], float, Scenario, Plan]] = []
    engines: dict[str, Target] = {}
    for e in chosen:
        tuned = configure(scn, e["values"])
        for factor in FACTORS:
            rate = e["capacity_req_s"] * factor
            plan = plan_runs(at_rate(tuned, e["arm"], rate), target)
            cells.append((e, factor, tuned, plan))
    results: list[list[RunResult]] = [[] for _ in cells]
    total = len(cells) * scn.repeats
    with tqdm(total=total, desc=f"verify [{target}]", unit="run", file=sys.stderr,
              disable=not progress, leave=False) as bar:
        for r in range(scn.repeats):
            for i, (_, _, tuned, plan) in enumerate(cells):
                interrupts.check()
                key = tuned.model + tuned.runner.model_dump_json()
                plan.real = engines.get(key)
                fresh = plan.real is None
                engine = target_of(plan)
                engines[key] = engine
                spec = plan.runs[r]
                point = plan.points[0]
                if fresh and scn.runner.warmup:
                    run_checked(plan, engine, point, spec)  # untimed: first-run costs
                results[i].append(run_checked(plan, engine, point, spec))
                bar.update()
    rows = []
    for (e, factor, tuned, plan), runs in zip(cells, results, strict=True):
        rate = e["capacity_req_s"] * factor
        measured = judge(e["arm"], rate, plan, runs, crit)
        sim = run_probe(tuned, rate, crit)
        gcrit = _goodput_crit(crit, tuned)
        row: dict[str, Any] = {"config_id": e["config_id"], "arm": e["arm"],
                               "factor": factor, "rate": rate,
                               "predicted_meets": sim.meets, "measured_meets": measured.meets,
                               "predicted": sim.values, "measured": measured.values,
                               "measured_reason": measured.reason}
        if gcrit is not None:
            row["measured_goodput_fraction"] = judge(
                e["arm"], rate, plan, runs, gcrit).values.get("goodput_fraction")
            row["predicted_goodput_fraction"] = run_probe(
                tuned, rate, gcrit).values.get("goodput_fraction")
        rows.append(row)
    return rows


def verify_md(rows: list[dict[str, Any]]) -> str:
    """The verification table of report.md."""
    lines = ["", f"Verified on the real engine ({len(rows)} cells; predicted / measured):", "",
             "| config | arm | rate | SLO met | values | goodput fraction |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        vals = ", ".join(f"{k} {_f(r['predicted'].get(k))} / {_f(v)}"
                         for k, v in r["measured"].items())
        good = (f"{_f(r.get('predicted_goodput_fraction'))} / "
                f"{_f(r.get('measured_goodput_fraction'))}")
        lines.append(f"| {r['config_id']} | {r['arm']} | {r['rate']:.4g} ({r['factor']:g}x) | "
                     f"{'yes' if r['predicted_meets'] else 'no'} / "
                     f"{'yes' if r['measured_meets'] else 'no'} | {vals} | {good} |")
    return "\n".join(lines) + "\n"


def _f(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}"
