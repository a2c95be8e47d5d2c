"""The batch sequences of the two worlds compared (the ``batches`` section of fidelity.json):
they must agree wherever the schedule does not depend on timing."""

from __future__ import annotations

from engine.core.records import BatchSignature, batch_signature
from loopserve.fidelity.json_types import BatchesSection, BatchRun
from loopserve.fidelity.world import WorldRun
from loopserve.plan import Plan, run_source


def describe_batch(sig: BatchSignature) -> str:
    """One line for a batch signature: stage and (request, kind, position, rows, depth)."""
    stage, items = sig
    parts = [f"{rid}:{kind[0]}@{pos}+{n}d{depth}" + (f"x{nd}" if nd != 1 else "")
             for rid, kind, pos, n, depth, nd in items]
    return f"{stage} [{', '.join(parts)}]"


def batch_comparison(plan: Plan, sim: list[WorldRun], real: list[WorldRun]) -> BatchesSection:
    """Per run pair, whether the sequences agree and where they first diverge."""
    runs = []
    for s, r in zip(sim, real, strict=True):
        a = [batch_signature(b) for b in s.batches]
        b = [batch_signature(x) for x in r.batches]
        first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                     None if len(a) == len(b) else min(len(a), len(b)))
        item: BatchRun = {"arm": s.spec.arm, "point_id": s.spec.point_id,
                                "repeat": s.spec.repeat, "same": first is None,
                                "num_sim": len(a), "num_measured": len(b),
                                "first_divergence": first}
        if first is not None:
            item["sim_batch"] = describe_batch(a[first]) if first < len(a) else None
            item["measured_batch"] = describe_batch(b[first]) if first < len(b) else None
        runs.append(item)
    return {"timing_dependent_schedule": _timed_arrivals(plan), "runs": runs}


def _timed_arrivals(plan: Plan) -> bool:
    """Whether the workload has arrivals at t > 0 (then the schedule depends on timing)."""
    spec = plan.runs[0]
    point = plan.point(spec.point_id)
    src = run_source(point.scenario, spec.seed, plan.shape)
    return any((s.arrival_s or 0.0) > 0.0 for s in src.initial())
