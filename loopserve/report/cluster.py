"""The cluster section of the report (runs with a ``cluster`` section): every configuration
(sweep point without its request rate, and arm) side by side at each request rate, on ITL
p99, TTFT p99 (and its split), output tok/s per GPU, mean replica utilisation and load
imbalance, with the capacity under the SLO read from the rate sweep, and a headline per rate
in the report's form: each disaggregated configuration against the best replicated one.

A disaggregated configuration runs the same in every arm (its prefill replicas are atomic,
its decode replicas run decode only, which no arm changes), so it is shown once when its
arms' medians agree. Capacity here is the highest swept rate up to which every rate meets
the SLO (">=" when that is the top of the sweep); ``loopserve capacity`` searches between
the swept rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loopserve.outputs.rundata import RunData
from loopserve.report.sections import Table, num
from loopserve.stats.metrics import metric

RATE_KEY = "workload.request_rate"
SAME_PCT = 0.5


@dataclass
class Config:
    """One configuration's medians by request rate."""

    label: str
    disaggregated: bool
    num_gpus: int
    by_rate: dict[float, dict[str, Any]] = field(default_factory=dict)

    def meets(self, rate: float, slo: dict[str, Any]) -> bool:
        m = self.by_rate[rate]
        if not m.get("valid", True):
            return False
        for key, limit in (("itl_ms", slo.get("itl_p99_ms")), ("ttft_ms", slo.get("ttft_p99_ms"))):
            value = metric(m, key, "p99")
            if limit is not None and (value is None or value > limit):
                return False
        return True

    def capacity(self, slo: dict[str, Any]) -> float | None:
        """The highest swept rate with every rate up to it meeting the SLO."""
        best = None
        for rate in sorted(self.by_rate):
            if not self.meets(rate, slo):
                break
            best = rate
        return best


def configs(run: RunData) -> list[Config]:
    """The run's configurations in point then arm order; a disaggregated one is one
    configuration when its arms agree at every rate, else one per arm."""
    base_rate = run.scenario.get("workload", {}).get("request_rate")
    by_arm: dict[tuple[str, str], Config] = {}
    for m in run.summary["medians"]:
        if "num_replicas" not in m:
            continue
        values = dict(run.point_values(int(m["point_id"])))
        rate = float(values.pop(RATE_KEY, base_rate or 0.0))
        name = ", ".join(f"{v}" if k == "variant" else f"{k}={v}" for k, v in values.items())
        name = name or f"{int(m['num_replicas'])} replicas"
        key = (name, str(m["arm"]))
        cfg = by_arm.setdefault(key, Config(f"{name} ({m['arm']})", "kv_transfer_ms" in m,
                                            int(m["num_replicas"])))
        cfg.by_rate[rate] = dict(m)
    out: list[Config] = []
    names = list(dict.fromkeys(name for name, _ in by_arm))
    for name in names:
        group = [c for (n, _), c in by_arm.items() if n == name]
        first = group[0]
        if first.disaggregated and all(
                c.by_rate.keys() == first.by_rate.keys()
                and all(_agrees(first.by_rate[r], c.by_rate[r]) for r in c.by_rate)
                for c in group[1:]):
            first.label = name
            out.append(first)
        else:
            out += group
    return out


def _agrees(a: dict[str, Any], b: Any) -> bool:
    return all(metric(a, k, s) == metric(b, k, s) for k, s in
               (("itl_ms", "p99"), ("ttft_ms", "p99"), ("output_tok_s", None)))


def _change(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else 100.0 * (a / b - 1.0)


def headlines(cfgs: Sequence[Config], slo: dict[str, Any]) -> list[str]:
    """Per rate and disaggregated configuration, the sentence against the replicated
    configuration with the lowest ITL p99 there; then the capacities."""
    out = []
    rates = sorted({r for c in cfgs for r in c.by_rate})
    for rate in rates:
        plain = [c for c in cfgs if not c.disaggregated and rate in c.by_rate]
        if not plain:
            continue
        ref = min(plain, key=lambda c: metric(c.by_rate[rate], "itl_ms", "p99") or float("inf"))
        rm = ref.by_rate[rate]
        for c in cfgs:
            if not c.disaggregated or rate not in c.by_rate:
                continue
            m = c.by_rate[rate]
            itl = _change(metric(m, "itl_ms", "p99"), metric(rm, "itl_ms", "p99"))
            ttft = _change(metric(m, "ttft_ms", "p99"), metric(rm, "ttft_ms", "p99"))
            tok = metric(m, "output_tok_s_per_gpu")
            tok_ref = metric(rm, "output_tok_s_per_gpu")
            if itl is None:
                continue
            verb = ("matches" if abs(itl) < SAME_PCT else
                    f"cuts ITL p99 by {-itl:.0f}%" if itl < 0 else f"raises ITL p99 by {itl:.0f}%")
            per_gpu = f"{tok / tok_ref:.2f}x" if tok and tok_ref else "–"
            out.append(f"at {rate:g} req/s: {c.label} {verb} against {ref.label} at {per_gpu} "
                       f"output tok/s per GPU; TTFT p99 "
                       + ("–" if ttft is None else f"{ttft:+.0f}%"))
    if slo and len(rates) > 1:
        caps = ", ".join(f"{c.label} {_cap_text(c, slo)}" for c in cfgs)
        out.append(f"capacity under the SLO (swept rates): {caps}")
    return out


def _cap_text(c: Config, slo: dict[str, Any]) -> str:
    cap = c.capacity(slo)
    if cap is None:
        return f"< {min(c.by_rate):g} req/s"
    return f">= {cap:g} req/s" if cap == max(c.by_rate) else f"{cap:g} req/s"


def cluster_runs(runs: Sequence[RunData]) -> list[dict[str, Any]]:
    """Per run with a cluster: its label, headlines and the table of its configurations at
    each rate; empty when no run has a cluster."""
    out = []
    for run in runs:
        cfgs = configs(run)
        if not cfgs:
            continue
        slo = run.scenario.get("slo") or {}
        table = Table(["configuration", "GPUs", "req/s", "ITL p99 (ms)", "TTFT p99 (ms)",
                       "TTFT p99 queue / prefill / transfer (ms)", "output tok/s per GPU",
                       "mean utilisation", "load imbalance", "SLO", "capacity"])
        for c in cfgs:
            cap = _cap_text(c, slo) if slo else "–"
            for rate in sorted(c.by_rate):
                m = c.by_rate[rate]
                util = [v for v in (m.get("replica_utilisation") or {}).values()
                        if isinstance(v, int | float)]
                table.rows.append([
                    c.label, str(c.num_gpus), f"{rate:g}",
                    num(metric(m, "itl_ms", "p99")), num(metric(m, "ttft_ms", "p99")),
                    " / ".join(num(metric(m, k, "p99"), 3) for k in
                               ("ttft_queue_ms", "ttft_prefill_ms", "ttft_transfer_ms")),
                    num(metric(m, "output_tok_s_per_gpu")),
                    num(sum(util) / len(util) if util else None, 3),
                    num(metric(m, "load_imbalance"), 3),
                    ("met" if c.meets(rate, slo) else "missed") if slo else "–", cap,
                ])
        out.append({"label": run.label, "headlines": headlines(cfgs, slo), "table": table})
    return out
