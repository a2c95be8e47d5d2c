"""One tune probe: a configuration's scenario run in simulation at one rate and judged
against the criterion as ``loopserve capacity`` judges it (``capacity_probe.judge``), with
the latencies the Pareto plot and the table show beside the criterion's values.

``run_probe`` is the body of a probe whether it runs in this process or as a Ray task
(``probe_task``), so the two give the same result. A probe pays only for what the SLO
needs: its runs keep no step rows (only their counts), and nothing is written.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from loopserve.plan import plan_runs
from loopserve.runs.capacity_probe import Criterion, at_rate, judge
from loopserve.runs.loop import execute
from loopserve.schema.scenario import Scenario
from loopserve.stats.metrics import metric
from loopserve.stats.summary import median_rows, run_row

# latencies read at every probe (median over repeats), whatever the SLO
REPORTED = ("ttft_p99_ms", "itl_p99_ms", "tpot_p99_ms")


@dataclass(frozen=True)
class ProbeResult:
    """A probed rate of one configuration: met or not, the criterion's values, the
    reported latencies and why it missed."""

    rate: float
    meets: bool
    valid: bool
    values: dict[str, float | None] = field(default_factory=dict)
    latencies: dict[str, float | None] = field(default_factory=dict)
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeResult:
        return cls(**data)


def run_probe(scn: Scenario, rate: float, crit: Criterion) -> ProbeResult:
    """Run the (one-arm) scenario's repeats at ``rate`` req/s and judge them."""
    (arm,) = scn.arms
    plan = plan_runs(at_rate(scn, arm, rate), "sim")
    results = execute(plan, progress=False, record_steps=False)
    row = judge(arm, rate, plan, results, crit)
    (median,) = median_rows([run_row(r, plan.target) for r in results], [arm])
    latencies = {}
    for key in REPORTED:
        name, stat, _ms = key.split("_")
        latencies[key] = metric(median, f"{name}_ms", stat)
    return ProbeResult(rate, row.meets, row.valid, dict(row.values), latencies, row.reason)


def probe_task(scn: Scenario, rate: float, crit: Criterion, cwd: str) -> ProbeResult:
    """``run_probe`` as a Ray task: relative paths in the scenario resolve as in the
    driver."""
    if os.path.isdir(cwd) and os.getcwd() != cwd:
        os.chdir(cwd)
    return run_probe(scn, rate, crit)
