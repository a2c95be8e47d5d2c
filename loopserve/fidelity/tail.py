"""What the slowest token intervals of each measured run are made of.

ITL p99 is set by the slowest 1% of the intervals between two tokens of one request. Each
interval is a run of steps (those that end after the first token and up to the second), so
its measured time can be split by step kind and set beside the profile's prediction for the
very same steps. For every measured run this section takes the intervals at or above the
run's measured p99 and reports, per kind, how many steps an interval holds and their
measured and predicted time, plus the host gaps between them. Each kind's ratio in the tail
is shown next to its median ratio over the whole run:

- tail ratio close to the run ratio: the tail is slow for the reason the whole run is (a
  term of the cost model, or the machine's overall speed);
- tail ratio well above the run ratio: the tail is made of steps that ran slow only there,
  short bursts of machine noise that a per-step cost model cannot predict.

It also flags a p99 that sits where the interval distribution jumps between clusters: there
the statistic is fragile in both worlds, whatever the cost model.
"""

from __future__ import annotations

import numpy as np

from loopserve.fidelity.json_types import TailKind, TailRun, TailSection
from loopserve.fidelity.world import WorldRun
from loopserve.stats.metrics import consecutive_tokens
from sim.cost.base import SplitCostModel

PERCENTILE = 99.0
BURST_RATIO = 1.25  # tail ratio / run ratio above which a kind's tail steps count as bursts
# (p99.5 - p98.5) / p99 above which p99 sits where the interval distribution jumps from one
# cluster to another (say, decode-only intervals and those stalled behind a prefill): there a
# few intervals more or less on either side move the statistic by tens of percent
EDGE = 0.5


def _intervals(run: WorldRun) -> list[tuple[int, int]]:
    """(first step, last step] of every inter-token interval (the pairs ITL is computed
    from), by the step that ended at each token's time (tokens carry their step's end)."""
    at_end = {s.end_s: i for i, s in enumerate(run.records.steps)}
    return [(at_end[a.time_s], at_end[b.time_s]) for a, b in consecutive_tokens(run.records)]


def _run_tail(run: WorldRun, cost: SplitCostModel) -> TailRun | None:
    steps = run.records.steps
    pred = run.predict(cost)
    ivs = _intervals(run)
    if not ivs:
        return None
    ends = np.array([s.end_s for s in steps])
    starts = np.array([s.start_s for s in steps])
    spans = np.array([ends[b] - ends[a] for a, b in ivs])
    threshold = float(np.percentile(spans, PERCENTILE))
    lo, hi = (float(v) for v in np.percentile(spans, [PERCENTILE - 0.5, PERCENTILE + 0.5]))
    in_tail = spans >= threshold
    tail = [iv for iv, keep in zip(ivs, in_tail, strict=True) if keep]
    kinds = [s.kind for s in steps]
    dur = ends - starts
    ratio = np.asarray(run.ratios(cost))
    by_kind: dict[str, dict[str, float]] = {}
    gap_meas = gap_pred = 0.0
    for a, b in tail:
        for i in range(a + 1, b + 1):
            row = by_kind.setdefault(kinds[i], {"steps": 0.0, "measured_ms": 0.0,
                                                "predicted_ms": 0.0})
            row["steps"] += 1
            row["measured_ms"] += dur[i] * 1e3
            row["predicted_ms"] += pred[i] * 1e3
            gap_meas += (starts[i] - ends[i - 1]) * 1e3
            gap_pred += cost.gap_time(run.batches[i]) * 1e3
    n = len(tail)
    out_kinds: dict[str, TailKind] = {}
    for kind, row in sorted(by_kind.items()):
        of_kind = ratio[[k == kind for k in kinds]]
        of_kind = of_kind[~np.isnan(of_kind)]
        out_kinds[kind] = {
            "steps": row["steps"] / n,
            "measured_ms": row["measured_ms"] / n,
            "predicted_ms": row["predicted_ms"] / n,
            "tail_ratio": row["measured_ms"] / row["predicted_ms"] if row["predicted_ms"] else None,
            "run_ratio": float(np.median(of_kind)) if of_kind.size else None,
        }
    excess = {k: v["measured_ms"] - v["predicted_ms"] for k, v in out_kinds.items()}
    worst = max(excess, key=lambda k: excess[k]) if excess else None
    bursts = None
    if worst is not None:
        w = out_kinds[worst]
        if w["tail_ratio"] is not None and w["run_ratio"]:
            bursts = bool(w["tail_ratio"] / w["run_ratio"] > BURST_RATIO)
    return {
        "arm": run.spec.arm, "point_id": run.spec.point_id, "repeat": run.spec.repeat,
        "num_intervals": len(ivs), "num_tail": n, "threshold_ms": threshold * 1e3,
        "around_ms": [lo * 1e3, hi * 1e3],
        "on_edge": threshold > 0 and (hi - lo) / threshold > EDGE,
        "measured_ms": float(np.mean(spans[in_tail])) * 1e3,
        "predicted_ms": sum(v["predicted_ms"] for v in out_kinds.values()) + gap_pred / n,
        "gap_measured_ms": gap_meas / n, "gap_predicted_ms": gap_pred / n,
        "by_kind": out_kinds, "largest_excess_kind": worst, "bursts": bursts,
    }


def tail(real: list[WorldRun], cost: SplitCostModel) -> TailSection:
    """The ``tail`` section of fidelity.json: one entry per measured run with intervals."""
    runs = [t for r in real if (t := _run_tail(r, cost)) is not None]
    return {"percentile": PERCENTILE, "burst_ratio": BURST_RATIO, "edge": EDGE,
            "measure": "intervals at or above the run's measured ITL p99; per interval",
            "runs": runs}


def reading(run: TailRun) -> str:
    """What one run's tail reads as: bursts, steady excess, or "-" (no prediction)."""
    return {True: "bursts", False: "steady excess", None: "-"}[run["bursts"]]


def edge_text(run: TailRun, percentile: float) -> str | None:
    """The warning for a percentile on a cluster edge, or None."""
    if not run["on_edge"]:
        return None
    lo, hi = run["around_ms"]
    return (f"p{percentile:g} {run['threshold_ms']:.1f} ms sits on a cluster edge "
            f"(p{percentile - 0.5:g} {lo:.1f}, p{percentile + 0.5:g} {hi:.1f} ms): "
            "a fragile statistic")


def tail_lines(section: TailSection) -> list[str]:
    """One line per measured run for the printed table."""
    lines = []
    for r in section["runs"]:
        parts = []
        for kind, v in sorted(r["by_kind"].items(), key=lambda kv: -kv[1]["measured_ms"]):
            if v["tail_ratio"] is None:
                continue
            parts.append(f"{kind} {v['measured_ms']:.1f}/{v['predicted_ms']:.1f} ms "
                         f"x{v['tail_ratio']:.2f} (run x{v['run_ratio']:.2f})")
        lines.append(f"  {r['arm']:<10} r{r['repeat']}: {r['measured_ms']:.1f} ms measured, "
                     f"{r['predicted_ms']:.1f} predicted: {'; '.join(parts)}  [{reading(r)}]")
        if (edge := edge_text(r, section["percentile"])) is not None:
            lines.append(f"  {'':<10}     {edge}")
    if lines:
        lines.insert(0, f"slowest {100 - section['percentile']:g}% of token intervals, measured/"
                        "predicted for the same steps (tail vs whole-run ratio):")
    return lines
