"""Simulator speed: core calls per second of wall time on a large Poisson scenario.

``make bench`` (``python -m tools.bench``) simulates Ouro-1.4B on the h200 roofline for every
arm, ``--repeats`` times each, and reports the median core calls/s next to a minimal SimPy
loop that yields the same number of timeouts as the run has steps, measured in the same
process, and (``--pure-repeats``) the same arm on the Python sources in a subprocess, so the
native build's speedup is a ratio measured side by side. ``--prefix-caching on`` (with
``--shared-prefix TOKENS`` for something to hit) measures the cost per core call with prefix
caching. The cluster row (``tools.bench_cluster``, ``--cluster-replicas``) prices a core call
of four replicas behind a router against one replica's, at the same load per replica. Writes
``results/bench/<UTC timestamp>/bench.json`` and ``env.json``. Then the real engine's host
time per core call at 1/8/16/64 decode rows (``tools.host_bench``;
``--host-steps 0`` skips it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Generator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import simpy

from engine.core import CacheConfig, EngineConfig, ExitConfig, SchedulerConfig
from engine.core.arms import ARMS
from engine.core.shapes import MODEL_SHAPES
from loopserve.outputs.env_info import git_commit, native_build, package_versions
from loopserve.outputs.files import staged_dir
from loopserve.workloads import build_source
from sim import CostModel, make_cost_model, simulate

# Each arm's median must reach both: a rate, and a share of what SimPy alone manages on the
# same machine in the same run (the ratio holds across machines, the rate on this one).
TARGET_CORE_CALLS_S = 150_000
TARGET_RATIO_TO_SIMPY_LOOP = 0.1
MODEL = "ouro-1.4b"
WORKLOAD: dict[str, Any] = {
    "kind": "poisson",
    "request_rate": 20.0,
    "prompt_tokens": {"dist": "lognormal", "median": 256, "sigma": 1.0, "min": 8, "max": 2048},
    "output_tokens": {"dist": "lognormal", "median": 128, "sigma": 0.8, "min": 1, "max": 1024},
}
SCHEDULER: dict[str, Any] = {"max_num_seqs": 16, "max_num_batched_tokens": 256,
                             "prefill_chunk_size": 128}
NUM_BLOCKS = 32_768  # 16-token blocks over 4 planes: ~131k positions, well above the load


def simpy_loop_rate(num_timeouts: int) -> float:
    """Timeouts per second of a SimPy process that does nothing else."""
    env = simpy.Environment()

    def loop() -> Generator[simpy.Event, Any, None]:
        for _ in range(num_timeouts):
            yield env.timeout(1e-3)

    env.process(loop())
    t0 = time.perf_counter()
    env.run()
    return num_timeouts / (time.perf_counter() - t0)


def workload(num_requests: int, shared_prefix: int) -> dict[str, Any]:
    """The benchmark's workload; ``shared_prefix`` tokens (0: none) open every prompt from one
    of eight prefixes, so prefix caching has something to hit."""
    spec = {**WORKLOAD, "num_requests": num_requests}
    if shared_prefix:
        spec["shared_prefix"] = {"tokens": shared_prefix, "num_prefixes": 8}
    return spec


def bench_engine(
    arm: str, scheduler: dict[str, Any] = SCHEDULER, *, prefix_caching: bool = False,
    exit: ExitConfig | None = None,
) -> tuple[EngineConfig, CostModel]:
    """The benchmark's engine in ``arm`` (``MODEL`` with ``scheduler``, a cache far above the
    load, ``exit`` or fixed exits) and its cost model, the h200 roofline."""
    shape = MODEL_SHAPES[MODEL]
    cfg = EngineConfig(shape, SchedulerConfig(arm=arm, **scheduler),
                       CacheConfig(num_blocks=NUM_BLOCKS, enable_prefix_caching=prefix_caching),
                       exit or ExitConfig())
    return cfg, make_cost_model("roofline", shape, hardware="h200")


def bench_arm(
    arm: str, num_requests: int, repeats: int, seed: int, scheduler: dict[str, Any],
    prefix_caching: bool = False, shared_prefix: int = 0,
) -> dict[str, Any]:
    cfg, cost = bench_engine(arm, scheduler, prefix_caching=prefix_caching)
    vocab_size = cfg.model.vocab_size
    source = build_source(workload(num_requests, shared_prefix), seed=seed, vocab_size=vocab_size)
    rates, loop_rates, walls = [], [], []
    for _ in range(repeats):
        rec = simulate(cfg, source, cost, seed=seed, vocab_size=vocab_size)
        rates.append(rec.num_core_calls / rec.wall_s)
        walls.append(rec.wall_s)
        loop_rates.append(simpy_loop_rate(len(rec.steps)))
    rate, loop_rate = statistics.median(rates), statistics.median(loop_rates)
    core_steps = [s for s in rec.steps if s.core_calls]
    rows = sum(s.core_calls * s.num_decode_items for s in core_steps) + sum(
        s.core_calls * s.num_prompt_tokens for s in core_steps)
    items = sum(s.core_calls * (s.num_decode_items + s.num_prompt_items) for s in core_steps)
    return {
        "arm": arm,
        "num_requests": len(rec.requests),
        "num_steps": len(rec.steps),
        "num_core_calls": rec.num_core_calls,
        "num_tokens": len(rec.tokens),
        "items_per_core_call": items / rec.num_core_calls,
        "rows_per_core_call": rows / rec.num_core_calls,
        "simulated_s": rec.steps[-1].end_s,
        "wall_s": walls,
        "core_calls_s": rates,
        "median_core_calls_s": rate,
        "median_us_per_core_call": 1e6 / rate,
        "median_steps_s": len(rec.steps) / statistics.median(walls),
        "simpy_loop_timeouts_s": loop_rate,
        "ratio_to_simpy_loop": rate / loop_rate,
    }


def _pure_run(arm: str, args: argparse.Namespace, native: dict[str, Any]) -> dict[str, Any]:
    """The same arm on the Python sources, in a subprocess (the modules load once per
    process); it must produce the same steps."""
    cmd = [sys.executable, "-m", "tools.bench", "--child", "--arms", arm,
           "--num-requests", str(args.num_requests), "--repeats", str(args.pure_repeats),
           "--seed", str(args.seed), "--max-num-seqs", str(args.max_num_seqs),
           "--prefix-caching", args.prefix_caching, "--shared-prefix", str(args.shared_prefix)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         env={**os.environ, "LOOPSERVE_NATIVE": "0"})
    pure: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if pure["native"] or (pure["num_steps"], pure["num_core_calls"]) != (
            native["num_steps"], native["num_core_calls"]):
        raise RuntimeError(f"{arm}: the pure-Python run differs from the native one: {pure}")
    return pure


def environment() -> dict[str, Any]:
    return {
        **package_versions(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "native": native_build(),
        "git": git_commit(),
        "command": " ".join([sys.executable, "-m", "tools.bench", *sys.argv[1:]]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__)
    parser.add_argument("--num-requests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-num-seqs", type=int, default=SCHEDULER["max_num_seqs"],
                        help="decode concurrency (the work per core call scales with it)")
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--pure-repeats", type=int, default=1,
                        help="runs per arm on the Python sources (LOOPSERVE_NATIVE=0), in a "
                             "subprocess, for the native speedup; 0 skips them")
    parser.add_argument("--host-steps", type=int, default=200,
                        help="decode steps per host-overhead point (0: skip that part)")
    parser.add_argument("--host-repeats", type=int, default=3)
    parser.add_argument("--host-contexts", type=int, nargs="+", default=[128, 768])
    parser.add_argument("--prefix-caching", choices=("off", "on"), default="off",
                        help="cache.enable_prefix_caching (default off, as the engine's)")
    parser.add_argument("--shared-prefix", type=int, default=0, metavar="TOKENS",
                        help="open every prompt with one of 8 shared prefixes of TOKENS")
    parser.add_argument("--cluster-replicas", type=int, default=4,
                        help="the cluster row: this many replicas at as many times the load "
                             "against one (0: skip)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.num_requests < 1 or args.repeats < 1 or args.max_num_seqs < 1:
        parser.error("--num-requests, --repeats and --max-num-seqs must be >= 1")
    if args.shared_prefix < 0:
        parser.error("--shared-prefix must be >= 0")
    scheduler = {**SCHEDULER, "max_num_seqs": args.max_num_seqs}
    caching = {"prefix_caching": args.prefix_caching == "on",
               "shared_prefix": args.shared_prefix}
    if args.child:  # one arm for the parent, as JSON on stdout
        r = bench_arm(args.arms[0], args.num_requests, args.repeats, args.seed, scheduler,
                      **caching)
        print(json.dumps({**r, "native": native_build()["active"]}))
        return 0

    native = native_build()
    print(f"simulating {args.num_requests} poisson requests on {MODEL}/h200 roofline, "
          f"median of {args.repeats} runs per arm (targets per arm: {TARGET_CORE_CALLS_S:,} core "
          f"calls/s and {TARGET_RATIO_TO_SIMPY_LOOP}x the SimPy loop)")
    kind = f" ({native['build']})" if native["build"] else ""
    print(f"native build: {native['reason']}{kind}; prefix caching {args.prefix_caching}"
          + (f", {args.shared_prefix}-token shared prefixes" if args.shared_prefix else ""))
    print(f"{'arm':<10} {'core calls':>10} {'steps':>8} {'items/call':>10} {'wall s':>7} "
          f"{'calls/s':>9} {'steps/s':>9} {'simpy loop/s':>12} {'ratio':>6} "
          f"{'pure calls/s':>12} {'speedup':>7} {'us/call':>7}")
    arms = []
    for arm in args.arms:
        r = bench_arm(arm, args.num_requests, args.repeats, args.seed, scheduler, **caching)
        if args.pure_repeats > 0:
            pure = _pure_run(arm, args, r)
            r["pure_core_calls_s"] = pure["core_calls_s"]
            r["pure_median_core_calls_s"] = pure["median_core_calls_s"]
            r["native_speedup"] = r["median_core_calls_s"] / pure["median_core_calls_s"]
        arms.append(r)
        pure_cols = (f"{r['pure_median_core_calls_s']:>12,.0f} {r['native_speedup']:>7.2f}"
                     if "native_speedup" in r else f"{'-':>12} {'-':>7}")
        print(f"{arm:<10} {r['num_core_calls']:>10,} {r['num_steps']:>8,} "
              f"{r['items_per_core_call']:>10.1f} {statistics.median(r['wall_s']):>7.2f} "
              f"{r['median_core_calls_s']:>9,.0f} {r['median_steps_s']:>9,.0f} "
              f"{r['simpy_loop_timeouts_s']:>12,.0f} {r['ratio_to_simpy_loop']:>6.3f} "
              f"{pure_cols} {r['median_us_per_core_call']:>7.2f}")
    result = {
        "model": MODEL, "hardware": "h200", "cost": "roofline",
        "workload": workload(args.num_requests, args.shared_prefix),
        "prefix_caching": args.prefix_caching == "on",
        "scheduler": scheduler, "num_blocks": NUM_BLOCKS, "seed": args.seed,
        "repeats": args.repeats, "target_core_calls_s": TARGET_CORE_CALLS_S,
        "target_ratio_to_simpy_loop": TARGET_RATIO_TO_SIMPY_LOOP,
        "native": native["active"], "arms": arms,
        "min_median_core_calls_s": min(a["median_core_calls_s"] for a in arms),
        "min_ratio_to_simpy_loop": min(a["ratio_to_simpy_loop"] for a in arms),
    }
    if args.cluster_replicas > 0:
        from tools.bench_cluster import cluster_row

        c = result["cluster"] = cluster_row(
            "mixed", workload(args.num_requests // args.cluster_replicas or 1, 0),
            args.cluster_replicas, args.repeats, args.seed, scheduler, NUM_BLOCKS, MODEL)
        med = c["median_us_per_core_call"]
        print(f"cluster: {c['num_replicas']} mixed replicas at {c['num_replicas']}x the load: "
              f"{med['cluster']:.2f} us/core call against {med['one']:.2f} for one "
              f"(x{c['ratio']:.2f}; budget x{c['num_replicas']}: "
              f"{'met' if c['within_budget'] else 'MISSED'})")
    if args.host_steps > 0:
        from tools import host_bench

        result["host_overhead"] = host_bench.run(tuple(args.host_contexts), args.host_steps,
                                                 max(1, args.host_repeats))
    final = args.out / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    with staged_dir(final) as tmp:
        (tmp / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
        (tmp / "env.json").write_text(json.dumps(environment(), indent=2) + "\n")
    slowest, lowest = result["min_median_core_calls_s"], result["min_ratio_to_simpy_loop"]
    print(f"slowest arm: {slowest:,.0f} core calls/s; target {TARGET_CORE_CALLS_S:,}: "
          f"{'met' if slowest >= TARGET_CORE_CALLS_S else 'MISSED'}")
    print(f"lowest ratio to the SimPy loop: {lowest:.3f}; target {TARGET_RATIO_TO_SIMPY_LOOP}: "
          f"{'met' if lowest >= TARGET_RATIO_TO_SIMPY_LOOP else 'MISSED'}")
    print(f"wrote {final}/bench.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
