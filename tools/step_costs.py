"""Where a simulated step's time goes, by step kind: ``make bench``'s workload driven through
the parts ``sim.driver`` runs (``EngineCore`` in a ``StepLoop``, the seeded executor, the step
clock on the roofline), each phase of each step timed apart.

``python -m tools.step_costs`` prints, per arm and step kind, the steps, their items, the
nanoseconds per step in each phase (``schedule``, ``execute``, ``price``, ``after``: apply,
token events and the recorder) and a least-squares fit of a step's time on its item count:
what a step of that kind costs whatever it holds (``fixed``) and what each item adds
(``per item``), for kinds with at least ``MIN_FIT_STEPS`` steps. The loop is the driver's
without SimPy (an idle engine jumps to the next arrival), so its steps are ``simulate``'s to
the bit (tests/tools/test_step_costs.py); it runs on the native build when ``engine._native``
loads one, but is itself interpreted, so its totals run about a tenth above ``make bench``'s.
Each phase reads the clock once more than an untimed step would: the ``timer`` is that
read's cost, taken off every phase.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from engine.core.arms import ARMS
from engine.core.engine_core import EngineCore
from engine.core.records import RunRecords
from engine.core.results import step_kind
from engine.core.run_loop import StepLoop
from engine.core.seeded_executor import SeededExecutor
from loopserve.outputs.env_info import native_build
from loopserve.workloads import build_source
from sim.step_clock import StepClock
from tools.bench import bench_engine, workload

PHASES = ("schedule", "execute", "price", "after")
MIN_FIT_STEPS = 1000  # fewer steps of a kind (a few prompt-only steps) fit mostly noise


@dataclass
class KindCosts:
    """One step kind's timings: per step, its item count and its nanoseconds per phase."""

    items: array[int] = field(default_factory=lambda: array("q"))
    phase_ns: tuple[array[int], ...] = field(
        default_factory=lambda: tuple(array("q") for _ in PHASES))

    def step_ns(self) -> list[int]:
        """Each step's nanoseconds, its phases summed."""
        return [sum(p) for p in zip(*self.phase_ns, strict=True)]


def timer_ns(samples: int = 100_000) -> float:
    """The median cost of one ``perf_counter_ns`` read, as seen between two others."""
    pc = time.perf_counter_ns
    gaps = []
    for _ in range(samples):
        t0 = pc()
        t1 = pc()
        gaps.append(t1 - t0)
    return statistics.median(gaps)


def run_arm(
    arm: str, spec: dict[str, Any], seed: int, record_steps: bool = True,
) -> tuple[RunRecords, dict[str, KindCosts]]:
    """The workload ``spec`` (``make bench``'s: ``tools.bench.workload``) in ``arm`` on
    ``make bench``'s engine, its steps timed by kind; also the run's records (without
    ``record_steps``, its step rows only counted, as a capacity probe runs)."""
    cfg, cost = bench_engine(arm)
    vocab_size = cfg.model.vocab_size
    source = build_source(spec, seed=seed, vocab_size=vocab_size)
    core = EngineCore(cfg)
    loop = StepLoop(core, source, record_steps=record_steps)
    assert loop.feeder is not None and loop.recorder is not None
    feeder = loop.feeder
    executor = SeededExecutor(seed=seed, vocab_size=vocab_size)
    clock = StepClock(cost, 0.0)
    costs: dict[str, KindCosts] = defaultdict(KindCosts)
    pc = time.perf_counter_ns
    now = 0.0
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as sim.step_clock.run_without_gc runs a simulation
    try:
        while True:
            if feeder.next_due_s <= now:
                feeder.submit_due(now)
            t0 = pc()
            batch = core.schedule(now) if core.has_work() else None
            t1 = pc()
            if batch is None:
                if feeder.exhausted:
                    break
                now = feeder.next_due_s
                continue
            result = executor.execute(batch)
            t2 = pc()
            end = clock.end_of(batch, now)
            t3 = pc()
            loop.after_step(batch, result, now, end)
            t4 = pc()
            now = end
            k = costs[step_kind(batch)]
            k.items.append(len(batch.items))
            for phase, ns in zip(k.phase_ns, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                phase.append(ns)
    finally:
        if gc_was_enabled:
            gc.enable()
    loop.drain()
    return loop.recorder.records, dict(costs)


def table(costs: dict[str, KindCosts], timer: float) -> list[dict[str, float | str]]:
    """One row per step kind, by time spent, the timer's cost taken off each phase."""
    step_ns = {kind: [t - len(PHASES) * timer for t in k.step_ns()]
               for kind, k in costs.items()}
    total = sum(sum(ns) for ns in step_ns.values())
    rows: list[dict[str, float | str]] = []
    for kind, k in costs.items():
        n, ns = len(k.items), step_ns[kind]
        row: dict[str, float | str] = {"kind": kind, "steps": n,
                                       "items_per_step": sum(k.items) / n}
        for name, phase in zip(PHASES, k.phase_ns, strict=True):
            row[name] = sum(phase) / n - timer
        row["ns_per_step"] = sum(ns) / n
        if n >= MIN_FIT_STEPS and len(set(k.items)) > 1:
            fit = statistics.linear_regression(list(k.items), ns)
            row["fixed_ns"], row["ns_per_item"] = fit.intercept, fit.slope
        row["share"] = sum(ns) / total
        rows.append(row)
    return sorted(rows, key=lambda r: -float(r["share"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.step_costs", description=__doc__)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--num-requests", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-rows", choices=("on", "off"), default="on",
                        help="off: count the step rows instead of recording them, as a "
                             "capacity probe does (``after`` then holds no step row)")
    args = parser.parse_args(argv)
    if args.num_requests < 1:
        parser.error("--num-requests must be >= 1")
    timer = timer_ns()
    native = native_build()
    print(f"make bench's workload, {args.num_requests} requests, step rows {args.step_rows}; "
          f"native build: {native['reason']}; timer {timer:.0f} ns per read, taken off every "
          "phase")
    for arm in args.arms:
        records, costs = run_arm(arm, workload(args.num_requests, 0), args.seed,
                                 record_steps=args.step_rows == "on")
        rows = table(costs, timer)
        step_s = sum(float(r["ns_per_step"]) * int(r["steps"]) for r in rows) / 1e9
        num_steps = sum(len(k.items) for k in costs.values())
        print(f"\n{arm}: {num_steps:,} steps, {records.num_core_calls:,} core calls "
              f"({num_steps / records.num_core_calls:.2f} steps and "
              f"{step_s / records.num_core_calls * 1e9:,.0f} ns per core call)")
        print(f"{'kind':<9} {'steps':>8} {'items':>6} " + " ".join(f"{p:>8}" for p in PHASES)
              + f" {'ns/step':>8} {'fixed':>7} {'per item':>8} {'share':>6}")
        for r in rows:
            fit = (f"{r['fixed_ns']:>7,.0f} {r['ns_per_item']:>8,.0f}" if "fixed_ns" in r
                   else f"{'-':>7} {'-':>8}")
            print(f"{r['kind']:<9} {r['steps']:>8,} {r['items_per_step']:>6.1f} "
                  + " ".join(f"{r[p]:>8,.0f}" for p in PHASES)
                  + f" {r['ns_per_step']:>8,.0f} {fit} {r['share']:>6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
