"""The workload the profile-guided native build trains on (``tools/build_native.py``).

``python -m tools.native_training`` runs in a child process with ``LOOPSERVE_NATIVE_DIR``
pointing at the instrumented build, whose counters the compiler then reads to lay out the
final build's branches and inline its hot calls. It simulates ``make bench``'s Poisson
workload in every arm, once more with prefix caching on shared prefixes, and once with
adaptive exits (Ouro's gate at a threshold that exits early, signals read back), on fewer
requests: the steps a simulation runs whatever the scenario. Code the training never runs is
compiled as without a profile (``-fprofile-partial-training``), so it is not slowed.
Exits 1 when the build it was pointed at is not the one loaded.
"""

from __future__ import annotations

import sys

from engine import _native

NUM_REQUESTS = 300


def _adaptive_exits() -> None:
    from engine.core import ExitConfig
    from loopserve.workloads import build_source
    from sim import simulate
    from tools.bench import bench_engine, workload

    for arm in ("atomic", "mixed"):
        cfg, cost = bench_engine(arm, exit=ExitConfig(mode="ouro", exit_threshold=0.5))
        vocab_size = cfg.model.vocab_size
        source = build_source(workload(NUM_REQUESTS, 0), seed=0, vocab_size=vocab_size)
        simulate(cfg, source, cost, seed=0, vocab_size=vocab_size)


def main() -> int:
    if not _native.active():
        print(f"native training: the build is not loaded ({_native.reason()})", file=sys.stderr)
        return 1
    from tools.bench import SCHEDULER, bench_arm

    for arm in ("atomic", "per_depth", "mixed", "wavefront"):
        bench_arm(arm, NUM_REQUESTS, 1, 0, SCHEDULER)
    bench_arm("mixed", NUM_REQUESTS, 1, 0, SCHEDULER, prefix_caching=True, shared_prefix=256)
    _adaptive_exits()
    return 0


if __name__ == "__main__":
    sys.exit(main())
