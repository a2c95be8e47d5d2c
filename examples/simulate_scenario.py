"""Simulate a scenario from Python and read its records as pandas DataFrames.

    python examples/simulate_scenario.py          # expected output: simulate_scenario.out
"""

from pathlib import Path

from loopserve.plan import plan_runs
from loopserve.runs.loop import execute
from loopserve.schema import load_scenario
from loopserve.stats.metrics import requests_frame, steps_frame, summarize

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "interference.yaml"

# The default scenario without its sweep, one repeat per arm, on the roofline cost model.
scenario = load_scenario(SCENARIO, ["repeats=1", "sweep=null", "cost={kind: roofline}"])
runs = execute(plan_runs(scenario, "sim"), progress=False)

for run in runs:
    steps = steps_frame(run.records)  # one row per scheduled batch (docs/design.md)
    requests = requests_frame(run.records)
    metrics = summarize(run.records)
    injected = requests[requests["injected"]]
    ttft_ms = (injected["first_token_s"] - injected["arrival_s"]).max() * 1e3
    print(f"{run.spec.arm:<9}  ITL p99 {metrics['itl_ms']['p99']:6.2f} ms  "
          f"injected TTFT max {ttft_ms:6.1f} ms  "
          f"core calls {steps['core_calls'].sum():5d} ({steps['mixed'].sum():4d} mixed)")
