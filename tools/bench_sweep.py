"""Sweep speed: a scenario's simulated runs in this process vs as Ray tasks on local workers.

``python -m tools.bench_sweep [SCENARIO] [--workers 2] [--heavy-set KEY=VALUE ...]`` times, in
one process and for two sweeps (the scenario as it is, and a heavier one: the same scenario
with ``--heavy-set`` overrides), side by side:

- ``sequential_s``: the runs executed in this process (``execute``);
- ``ray_start_s``: ``ray_session``'s start-up, ``ray.init`` plus the workers' warm-up
  (``warm_workers``, timed alone as ``warm_up_s``; ``warm_pids`` distinct workers reached);
- ``ray_runs_s``: the runs as Ray tasks on that freshly started Ray (the sweep's first tasks,
  on warmed workers), and ``speedup_runs`` against sequential;
- ``ray_shutdown_s`` and the whole command's Ray part, ``ray_whole_s`` = start-up + runs +
  shutdown, and ``speedup_whole`` (planning and writing cost the same both ways);
- ``results_identical``: every run's records and summary compare equal, field by field.

For the scenario as it is, also ``ray_runs_again_s`` (its runs once more on the same workers:
the first sweep should match it), Ray's overhead per task on that Ray (the median round trip
of one trivial task, and the time per trivial task when many are queued) and, before any Ray,
``parallel_ceiling``: N sequential sweeps at once in forked processes, as throughput against
one alone (what the cores give, whatever Ray does). From the heavy sweep's
fixed cost F (start-up + shutdown) and speed-up S, ``break_even_sequential_s`` = F / (1 - 1/S):
the sequential sweep time above which ``--workers`` pays. Prints one JSON object; every number
is measured in that process (the load average at the start bounds any speed-up).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from loopserve.runs import ray_runs, wire
from loopserve.runs.loop import RunResult, execute
from loopserve.runs.plan import Plan, plan_runs
from loopserve.runs.ray_runs import RayOptions, execute_on_ray, ray_session
from loopserve.schema import load_scenario

HEAVY_SET = ["workload.decode_output_tokens=4096"]  # 8x the default's decode tokens per run


def _noop(x: int) -> int:
    return x


def _data(r: RunResult) -> tuple[Any, ...]:
    """Everything of a run but its wall time, as plain values."""
    rec = r.records
    rows = tuple([wire.row_values(x) for x in getattr(rec, n)]
                 for n in ("steps", "tokens", "requests"))
    return (r.spec, rows, rec.invalid_reasons, rec.prefix_cache and
            wire.row_values(rec.prefix_cache), r.metrics, r.invalid_reasons)


def _overhead(ray: Any, n: int) -> dict[str, float]:
    """Ray's own cost per task: one trivial task's round trip, and per task when queued."""
    noop = ray.remote(_noop)
    trips = []
    for i in range(n):
        t0 = time.perf_counter()
        ray.get(noop.remote(i))
        trips.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    ray.get([noop.remote(i) for i in range(n)])
    return {"task_round_trip_ms_median": round(statistics.median(trips) * 1e3, 3),
            "task_overhead_ms_batched": round((time.perf_counter() - t0) / n * 1e3, 3)}


_forked: list[Plan] = []  # the plan a forked child runs (plans do not pickle)


def _alone(_: int = 0) -> float:
    """One sequential sweep's seconds, of the plan in ``_forked``."""
    t0 = time.perf_counter()
    execute(_forked[0], progress=False)
    return time.perf_counter() - t0


def _ceiling(plan: Plan, workers: int) -> float:
    """The machine's own parallel ceiling: ``workers`` sequential sweeps at once in forked
    processes, as throughput against one sweep alone (other load and shared cores lower it
    below ``workers``; no Ray involved)."""
    _forked[:] = [plan]
    one = _alone()
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        t0 = time.perf_counter()
        list(pool.map(_alone, range(workers)))
        both = time.perf_counter() - t0
    return workers * one / both


def _sweep(plan: Plan, workers: int, trivial: int) -> dict[str, Any]:
    """One sweep both ways: sequential, then on a Ray started for it (as the command does)."""
    t0 = time.perf_counter()
    seq = execute(plan, progress=False)
    seq_s = time.perf_counter() - t0
    warm: dict[str, Any] = {}
    real_warm = ray_runs.warm_workers

    def timed_warm(ray: Any, n: int) -> list[int]:
        t1 = time.perf_counter()
        warm["pids"] = real_warm(ray, n)
        warm["s"] = time.perf_counter() - t1
        return warm["pids"]

    opts = RayOptions(workers=workers)
    ray_runs.warm_workers = timed_warm  # type: ignore[assignment]  # times it, changes nothing
    try:
        t0 = time.perf_counter()
        with ray_session(opts) as ray:
            start_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            par = execute_on_ray(plan, opts, progress=False)  # on the Ray started above
            runs_s = time.perf_counter() - t1
            extra: dict[str, Any] = {}
            if trivial:  # the scenario as it is: its runs once more on the same workers
                t2 = time.perf_counter()
                execute_on_ray(plan, opts, progress=False)
                extra["ray_runs_again_s"] = round(time.perf_counter() - t2, 3)
                extra.update(_overhead(ray, trivial))
            t1 = time.perf_counter()
        shutdown_s = time.perf_counter() - t1
    finally:
        ray_runs.warm_workers = real_warm  # type: ignore[assignment]
    whole_s = start_s + runs_s + shutdown_s
    return {
        "runs": len(plan.runs), "sequential_s": round(seq_s, 3),
        "ray_start_s": round(start_s, 3), "warm_up_s": round(warm["s"], 3),
        "warm_pids": len(warm["pids"]),
        "ray_runs_s": round(runs_s, 3), "speedup_runs": round(seq_s / runs_s, 2),
        "ray_shutdown_s": round(shutdown_s, 3), "ray_whole_s": round(whole_s, 3),
        "speedup_whole": round(seq_s / whole_s, 2),
        "results_identical": all(_data(a) == _data(b) for a, b in zip(seq, par, strict=True)),
        **extra,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?", default="scenarios/interference.yaml")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--trivial", type=int, default=200, help="trivial tasks timed")
    ap.add_argument("--heavy-set", action="append", metavar="KEY=VALUE",
                    help=f"the heavy sweep's overrides (default {' '.join(HEAVY_SET)}); "
                    "'none' skips it")
    args = ap.parse_args(argv)
    heavy_set = args.heavy_set or HEAVY_SET
    wire.register()
    out: dict[str, Any] = {
        "scenario": args.scenario, "workers": args.workers, "cpus": os.cpu_count(),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
    }
    default_plan = plan_runs(load_scenario(args.scenario, []), "sim")
    # before any Ray starts (forking a process that runs Ray is unsafe)
    out["parallel_ceiling"] = round(_ceiling(default_plan, args.workers), 2)
    out["default"] = _sweep(default_plan, args.workers, args.trivial)
    same = out["default"]["results_identical"]
    if heavy_set != ["none"]:
        heavy = _sweep(plan_runs(load_scenario(args.scenario, heavy_set), "sim"),
                       args.workers, 0)
        out["heavy"] = {"set": heavy_set, **heavy}
        fixed = heavy["ray_start_s"] + heavy["ray_shutdown_s"]
        gain = 1 - heavy["ray_runs_s"] / heavy["sequential_s"]
        out["break_even_sequential_s"] = round(fixed / gain, 1) if gain > 0 else None
        same = same and heavy["results_identical"]
    out["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
