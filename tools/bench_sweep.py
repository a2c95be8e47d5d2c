"""Sweep speed: a scenario's simulated runs in this process vs as Ray tasks on local workers.

``python -m tools.bench_sweep [SCENARIO] [--workers 2]`` times, in one process: the runs
executed sequentially (``execute``), Ray's start-up (``ray.init`` until a trivial task has
run on every worker), the median round trip of one trivial task and the time per trivial task
when many are queued (Ray's overhead per task), the runs as Ray tasks on that Ray
(``--workers`` CPUs), once on fresh workers (their imports included) and once more on the
same workers, then checks that both ways give the
same results (every run's records and summary compare equal, field by field). Prints one JSON
object. The whole-command comparison (start-up and writing included) is ``loopserve run``
with and without ``--workers`` (docs/contracts.md, "Ray-parallel sweeps").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from loopserve.runs import wire
from loopserve.runs.loop import RunResult, execute
from loopserve.runs.plan import plan_runs
from loopserve.runs.ray_runs import RayOptions, execute_on_ray, ray_session
from loopserve.schema import load_scenario


def _noop(x: int) -> int:
    return x


def _data(r: RunResult) -> tuple[Any, ...]:
    """Everything of a run but its wall time, as plain values."""
    rec = r.records
    rows = tuple([wire.row_values(x) for x in getattr(rec, n)]
                 for n in ("steps", "tokens", "requests"))
    return (r.spec, rows, rec.invalid_reasons, rec.prefix_cache and
            wire.row_values(rec.prefix_cache), r.metrics, r.invalid_reasons)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?", default="scenarios/interference.yaml")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--trivial", type=int, default=200, help="trivial tasks timed")
    args = ap.parse_args(argv)
    wire.register()
    load = os.getloadavg()[0]  # other processes' share of the cores bounds any speedup
    plan = plan_runs(load_scenario(args.scenario, []), "sim")
    t0 = time.perf_counter()
    seq = execute(plan, progress=False)
    seq_s = time.perf_counter() - t0
    opts = RayOptions(workers=args.workers)
    t0 = time.perf_counter()
    with ray_session(opts) as ray:
        noop = ray.remote(_noop)
        ray.get([noop.remote(i) for i in range(args.workers)])
        start_s = time.perf_counter() - t0
        trips = []
        for i in range(args.trivial):
            t1 = time.perf_counter()
            ray.get(noop.remote(i))
            trips.append(time.perf_counter() - t1)
        t1 = time.perf_counter()
        ray.get([noop.remote(i) for i in range(args.trivial)])
        batch_s = (time.perf_counter() - t1) / args.trivial
        t1 = time.perf_counter()
        par = execute_on_ray(plan, opts, progress=False)  # on the Ray started above
        par_s = time.perf_counter() - t1
        t1 = time.perf_counter()
        execute_on_ray(plan, opts, progress=False)  # again, on workers that have imported
        warm_s = time.perf_counter() - t1
    same = all(_data(a) == _data(b) for a, b in zip(seq, par, strict=True))
    out: dict[str, Any] = {
        "scenario": args.scenario, "runs": len(plan.runs), "workers": args.workers,
        "cpus": os.cpu_count(), "load_avg_1m_at_start": round(load, 2),
        "sequential_s": round(seq_s, 3),
        "ray_start_s": round(start_s, 3),
        "ray_runs_s": round(par_s, 3),
        "speedup_runs": round(seq_s / par_s, 2),
        "ray_runs_warm_workers_s": round(warm_s, 3),
        "speedup_runs_warm_workers": round(seq_s / warm_s, 2),
        "speedup_with_start": round(seq_s / (par_s + start_s), 2),
        "task_round_trip_ms_median": round(statistics.median(trips) * 1e3, 3),
        "task_overhead_ms_batched": round(batch_s * 1e3, 3),
        "results_identical": same,
    }
    print(json.dumps(out, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
