"""Run-folder size and peak memory of an overloaded simulated Poisson run, per 1,000 requests.

``make bench`` runs ``python -m tools.bench_outputs``: ``loopserve run scenarios/poisson.yaml``
(one arm, one repeat, no sweep, 64 req/s, far above what the arm serves) at two sizes in
subprocesses, and reports each run's bytes on disk and peak resident memory, then the
marginal cost per 1,000 requests (the slope between the two sizes) and the fixed part, with
the 100k-request run they extrapolate to (the target: at most 150 MB and 2 GB).
Writes ``results/bench/<UTC timestamp>-outputs/outputs.json``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loopserve.outputs.files import write_json

TARGET_100K_BYTES = 150e6
TARGET_100K_RSS = 2e9


def command(num_requests: int, out: Path, fmt: str) -> list[str]:
    """The measured run, as a reader would type it."""
    return [sys.executable, "-m", "loopserve", "run", "scenarios/poisson.yaml",
            "--set", "sweep=null", "--set", "repeats=1", "--set", "arms=[mixed]",
            "--set", f"workload.num_requests={num_requests}",
            "--set", "workload.request_rate=64", "--format", fmt, "--no-progress",
            "--out", str(out)]


def measure(num_requests: int, fmt: str) -> dict[str, Any]:
    """One run in a child process: its files' bytes and its peak RSS (the child's
    ``ru_maxrss``: a fresh interpreter per measurement, so each peak is its own)."""
    with tempfile.TemporaryDirectory(prefix="bench-outputs-") as tmp:
        out = Path(tmp) / "run"
        probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
                 "stdout=subprocess.DEVNULL); print(resource.getrusage("
                 "resource.RUSAGE_CHILDREN).ru_maxrss)")
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", probe, *command(num_requests, out, fmt)],
                              check=True, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}
    rss = int(done.stdout.strip().splitlines()[-1]) * 1024  # ru_maxrss is in KiB on Linux
    return {"num_requests": num_requests, "format": fmt, "bytes": sum(files.values()),
            "files": files, "peak_rss_bytes": rss, "wall_s": round(wall, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench_outputs", description=__doc__)
    p.add_argument("--sizes", type=int, nargs=2, default=[2000, 10000],
                   metavar=("SMALL", "LARGE"), help="requests of the two runs")
    p.add_argument("--format", default="parquet", choices=("parquet", "csv"))
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    args = p.parse_args(argv)
    small, large = sorted(args.sizes)
    if small < 1 or large <= small:
        p.error("--sizes: two request counts, the second larger")
    runs = [measure(n, args.format) for n in (small, large)]
    k = (large - small) / 1000
    per_1k = {key: (runs[1][key] - runs[0][key]) / k for key in ("bytes", "peak_rss_bytes")}
    fixed = {key: runs[1][key] - per_1k[key] * large / 1000 for key in per_1k}
    at_100k = {key: fixed[key] + 100 * per_1k[key] for key in per_1k}
    print(f"overloaded poisson (mixed, 64 req/s) in simulation, {args.format} tables:")
    print(f"{'requests':>9} {'MB on disk':>11} {'peak RSS MB':>12} {'wall s':>7}")
    for r in runs:
        print(f"{r['num_requests']:>9,} {r['bytes'] / 1e6:>11.2f} "
              f"{r['peak_rss_bytes'] / 1e6:>12.0f} {r['wall_s']:>7.1f}")
    print(f"per 1,000 requests: {per_1k['bytes'] / 1e6:.3f} MB on disk, "
          f"{per_1k['peak_rss_bytes'] / 1e6:.1f} MB peak RSS (fixed part "
          f"{fixed['peak_rss_bytes'] / 1e6:.0f} MB)")
    print(f"extrapolated to 100,000: {at_100k['bytes'] / 1e6:.0f} MB on disk (target <= "
          f"{TARGET_100K_BYTES / 1e6:.0f}), {at_100k['peak_rss_bytes'] / 1e9:.2f} GB peak RSS "
          f"(target <= {TARGET_100K_RSS / 1e9:.0f})")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    dest = args.out / f"{stamp}-outputs"
    dest.mkdir(parents=True, exist_ok=True)
    write_json(dest / "outputs.json", {
        "runs": runs, "per_1000_requests": per_1k, "fixed": fixed,
        "extrapolated_100k": at_100k,
        "targets_100k": {"bytes": TARGET_100K_BYTES, "peak_rss_bytes": TARGET_100K_RSS},
        "command": " ".join(command(large, Path("OUT"), args.format)),
    })
    print(f"wrote {dest / 'outputs.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
