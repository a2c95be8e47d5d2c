"""A what-if sweep in simulation: how does the prompt chunk size trade decode tail latency
(ITL p99) against the injected prompts' TTFT, per arm, before anyone rents a GPU?

    python examples/what_if_sweep.py              # expected output: what_if_sweep.out
"""

from pathlib import Path

import pandas as pd

from loopserve.plan import plan_runs
from loopserve.runs.loop import execute
from loopserve.schema import load_scenario

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "interference.yaml"

# Any scalar field can be swept by its dotted name, exactly as in a scenario's sweep section.
scenario = load_scenario(SCENARIO, [
    "repeats=1", "cost={kind: roofline}", "workload.decode_population=8",
    "sweep={scheduler.prefill_chunk_size: [32, 64, 128, 192]}",
])
plan = plan_runs(scenario, "sim")
rows = [{"chunk": plan.points[r.spec.point_id].values["scheduler.prefill_chunk_size"],
         "arm": r.spec.arm,
         "itl_p99_ms": r.metrics["itl_ms"]["p99"],
         "ttft_p99_ms": r.metrics["ttft_ms"]["p99"],
         "output_tok_s": r.metrics["output_tok_s"]}
        for r in execute(plan, progress=False)]

table = pd.DataFrame(rows).pivot(index="chunk", columns="arm")
table = table.reindex(columns=["atomic", "per_depth", "mixed", "wavefront"], level=1)
with pd.option_context("display.width", 200, "display.max_columns", 20,
                       "display.precision", 1):
    print(table.to_string())
