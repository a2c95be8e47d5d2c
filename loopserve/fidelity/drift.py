"""How the measured machine's speed moved during each real run, seen through its own steps.

For each measured run, the ratio measured / predicted execute time of its decode-only core
calls (the most numerous kind, and the most sensitive to memory bandwidth), as the median of
each tenth of the run in step order. A flat row near 1 means the profile holds throughout; a
row that wanders means the machine itself changed speed mid-run (a shared machine's
neighbours), which no cost model of the step can predict.
"""

from __future__ import annotations

import numpy as np

from loopserve.fidelity.doc import DriftRun, DriftSection
from loopserve.fidelity.world import WorldRun
from sim.cost.base import SplitCostModel

NUM_PARTS = 10
KIND = "decode"


def drift(real: list[WorldRun], cost: SplitCostModel) -> DriftSection:
    """The ``drift`` section of fidelity.json: per measured run, the ratio by tenth."""
    runs: list[DriftRun] = []
    for r in real:
        ratios = [x for s, x in zip(r.records.steps, r.ratios(cost), strict=True)
                  if s.kind == KIND and x == x]
        parts = ([float(np.median(chunk)) for chunk in np.array_split(ratios, NUM_PARTS)]
                 if len(ratios) >= NUM_PARTS else None)
        runs.append({
            "arm": r.spec.arm, "point_id": r.spec.point_id, "repeat": r.spec.repeat,
            "num_steps": len(ratios), "ratio_by_tenth": parts,
            "range": (max(parts) / min(parts)) if parts else None,
        })
    return {"kind": KIND, "measure": "measured / predicted execute time", "runs": runs}


def drift_lines(section: DriftSection) -> list[str]:
    """One line per measured run for the printed table."""
    lines = []
    for r in section["runs"]:
        if r["ratio_by_tenth"]:
            tenths = " ".join(f"{v:.2f}" for v in r["ratio_by_tenth"])
            lines.append(f"  {r['arm']:<10} r{r['repeat']}: {tenths}  (range x{r['range']:.2f})")
    if lines:
        lines.insert(0, f"measured / predicted {section['kind']} step time, by tenth of each "
                        "run (the machine's own drift):")
    return lines
