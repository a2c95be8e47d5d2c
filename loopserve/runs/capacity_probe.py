"""One capacity probe: an arm of a scenario run at a request rate, checked against the SLO.

The SLO is a set of limits on summary metrics, ``{metric}_{stat}_ms <= limit`` (``ttft_p99_ms``,
``itl_p99_ms``, ``tpot_p90_ms``, ``e2el_mean_ms``...), read from the median over the repeats,
optionally with a goodput fraction: the median over repeats of request_goodput /
request_throughput (the share of completed requests that meet every per-request SLO, vLLM's
and DistServe's goodput) at least ``goodput_fraction``. A probe whose metric has no sample does
not meet it. Validity (RFC §6) does not decide it: those rules exist to compare arms (a mixed
arm at a low rate forms no mixed core call, and is still a server at that rate), so an invalid
probe is judged on its metrics like any other, and its reason shown beside the verdict;
otherwise the capacity found would depend on the rate the search starts from.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loopserve.errors import UserError
from loopserve.outputs.vllm_results import ResultOptions, vllm_run_results
from loopserve.plan import Plan, plan_runs
from loopserve.runs.loop import execute
from loopserve.schema.load import validate
from loopserve.schema.scenario import Scenario
from loopserve.stats.metrics import metric
from loopserve.stats.summary import build_summary
from loopserve.targets import Target
from loopserve.workloads import GammaWorkload, PoissonWorkload

RATE_WORKLOADS = ("poisson", "gamma")
SLO_KEY = re.compile(r"^(ttft|tpot|itl|e2el)_(mean|p50|p90|p99|max)_ms$")


@dataclass(frozen=True)
class Criterion:
    """What a probe must meet: metric limits (ms) and an optional goodput fraction."""

    limits: dict[str, float]
    goodput_fraction: float | None = None
    goodput: dict[str, float] | None = None  # per-request SLOs (ms) behind the fraction

    @property
    def columns(self) -> list[str]:
        """The values a probe reports, in order."""
        return list(self.limits) + (["goodput_fraction"] if self.goodput_fraction else [])


@dataclass
class ProbeRow:
    """A probed rate's result for one arm."""

    arm: str
    rate: float
    meets: bool
    valid: bool
    values: dict[str, float | None] = field(default_factory=dict)
    reason: str | None = None


def parse_slo(text: str) -> dict[str, float]:
    """``"ttft_p99_ms=200,itl_p99_ms=10"`` -> limits; UserError naming ``--slo``."""
    out: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        key, sep, value = item.partition("=")
        if not sep or not SLO_KEY.match(key):
            raise UserError("--slo", f"{item!r} must be METRIC_STAT_ms=LIMIT with METRIC one of "
                            "ttft|tpot|itl|e2el and STAT one of mean|p50|p90|p99|max, e.g. "
                            "ttft_p99_ms=200,itl_p99_ms=10")
        try:
            limit = float(value)
        except ValueError:
            raise UserError("--slo", f"{item!r}: {value!r} is not a number of ms") from None
        if not (limit > 0 and np.isfinite(limit)):
            raise UserError("--slo", f"{item!r}: the limit must be a number of ms > 0")
        if key in out:  # the last would win without a word
            raise UserError("--slo", f"{key} given twice ({out[key]:g} and {limit:g}); give "
                            "each once")
        out[key] = limit
    if not out:
        raise UserError("--slo", "empty; give e.g. ttft_p99_ms=200,itl_p99_ms=10")
    return out


def check_rate_workload(scn: Scenario) -> float:
    """The scenario's request rate; UserError unless its workload has one."""
    wl = scn.workload
    if not isinstance(wl, PoissonWorkload | GammaWorkload):
        article = "an" if wl.kind[0] in "aeiou" else "a"
        raise UserError("workload.kind", f"{article} {wl.kind} workload has no request rate to "
                        f"search; use a {' or '.join(RATE_WORKLOADS)} workload")
    return float(wl.request_rate)


def base_scenario(scn: Scenario, **changes: Any) -> Scenario:
    """The scenario without sweep or variants (the one capacity searches), with top-level
    ``changes``, validated again."""
    data: dict[str, Any] = scn.model_dump(exclude_unset=True)
    data.pop("sweep", None)
    data.pop("variants", None)
    data.update(changes)
    return validate(data)


def at_rate(scn: Scenario, arm: str, rate: float) -> Scenario:
    """The base scenario with one arm, at ``rate`` req/s."""
    workload = dict(scn.workload.model_dump(exclude_unset=True), request_rate=rate)
    return base_scenario(scn, arms=[arm], workload=workload)


def judge(arm: str, rate: float, plan: Plan, results: list[Any],
          crit: Criterion) -> ProbeRow:
    """Check one probe's runs (every repeat of one arm) against the criterion."""
    (median,) = build_summary(plan, results)["medians"]
    row = ProbeRow(arm, rate, True, bool(median["valid"]))
    failed: list[str] = []
    for key, limit in crit.limits.items():
        name, stat, _ms = key.split("_")
        value = metric(median, f"{name}_ms", stat)
        row.values[key] = value
        if value is None or value > limit:
            failed.append(f"{key} {'-' if value is None else f'{value:.4g}'} > {limit:g}")
    if crit.goodput_fraction is not None:
        entries = vllm_run_results(results, plan.target, None, ResultOptions(
            percentile_metrics=(), percentiles=(), goodput=crit.goodput))
        fractions = [e["request_goodput"] / e["request_throughput"] for e in entries
                     if e["request_throughput"]]
        frac = float(np.median(fractions)) if fractions else None
        row.values["goodput_fraction"] = frac
        if frac is None or frac < crit.goodput_fraction:
            failed.append(f"goodput fraction {'-' if frac is None else f'{frac:.3g}'} < "
                          f"{crit.goodput_fraction:g}")
    row.meets = not failed
    if not row.valid:  # said, not counted: see the module docstring
        failed.append(f"invalid for comparing arms (not counted against the SLO): "
                      f"{median['invalid_reason']}")
    row.reason = "; ".join(failed) or None
    return row


def _quiet(plan: Plan) -> list[Any]:
    # the capacity command's bar counts probes; the SLO needs no step rows
    return execute(plan, progress=False, record_steps=False)


def prober(scn: Scenario, arm: str, target: str, crit: Criterion,
           run: Callable[[Plan], list[Any]] = _quiet) -> Callable[[float], ProbeRow]:
    """``probe(rate)``: plan, run and judge ``arm`` at ``rate``. A real target's engine is
    built by the first probe and reused by the later ones."""
    real: list[Target | None] = [None]

    def probe(rate: float) -> ProbeRow:
        plan = plan_runs(at_rate(scn, arm, rate), target)
        plan.real = real[0]
        results = run(plan)
        real[0] = plan.real
        return judge(arm, rate, plan, results, crit)

    return probe
