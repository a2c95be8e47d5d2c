"""Compile engine/core and the simulator's per-step modules with mypyc (``make native``).

The core is mypy-strict Python; mypyc turns its classes into C structs and its methods into
C functions, which is what lets the simulator reach its speed target (``make bench``). The
Python sources stay the reference: the compiled modules in ``build/native`` are loaded only
while its manifest matches the sources byte for byte and the running Python, and
``LOOPSERVE_NATIVE=0`` turns them off (``engine/_native.py``).

The build goes to a temp dir beside ``build/native`` and is renamed into place when complete.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ["LOOPSERVE_NATIVE"] = "0"  # build from the sources, whatever build is there now
from engine._native import (  # noqa: E402
    GROUP_NAME,
    MANIFEST,
    NATIVE_DIR,
    REPO_ROOT,
    source_digest,
    source_path,
)

# Not compiled: package __init__s, errors (raised at most once per run), config (the scenario
# schema reads its dataclass annotations; built once per run), executor (a Protocol, no code),
# and the rest of sim (the calibrated model's pydantic profile, exit profiles, validity, the
# cluster's router and driver: once per run or per request). The exit model is compiled for its
# signal functions, called once per decode row that reads a signal; the calibrated model's
# features and linear fits and the cluster replica's step loop run once per step. What the
# compiled modules need of the code: engine/_native.py.
MODULES = tuple(f"engine.core.{m}" for m in (
    "admission", "arrivals", "batch", "block_manager", "columns", "engine_core", "exits",
    "kv_allocation", "policies", "prefix_cache", "prompt_state", "records", "request",
    "results", "row_table", "run_loop", "scheduler", "seeded_executor", "stable_seeds",
    "token_table", "wavefront",
)) + ("sim.driver", "sim.exit_model", "sim.step_clock", "sim.cost.base",
     "sim.cost.roofline", "sim.cost.features", "sim.cost.linear_fit", "sim.cluster.replica")


def sources() -> list[Path]:
    """What the build depends on: the compiled modules and every engine/core source (their
    classes and constants are read by compiled code)."""
    deps = {source_path(m) for m in MODULES} | set((REPO_ROOT / "engine" / "core").glob("*.py"))
    return sorted(deps)


def build(out_dir: Path = NATIVE_DIR, *, quiet: bool = True) -> Path:
    """Compile MODULES and atomically replace ``out_dir``; returns the manifest path."""
    from mypyc.build import mypycify
    from setuptools import setup

    paths = [str(source_path(m)) for m in MODULES]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".native-", dir=out_dir.parent))
    try:
        lib = work / "lib"
        ext_modules = mypycify(paths, group_name=GROUP_NAME, target_dir=str(work / "c"))
        args = ["build_ext", "--build-lib", str(lib), "--build-temp", str(work / "o"), "-j", "2"]
        if quiet:
            args.insert(0, "--quiet")
        setup(name="loopserve-native", ext_modules=ext_modules, script_args=args)
        manifest = {
            "cache_tag": sys.implementation.cache_tag,
            "modules": list(MODULES),
            "sources": {str(p.relative_to(REPO_ROOT)): source_digest(p) for p in sources()},
        }
        (lib / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        lib.rename(out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out_dir / MANIFEST


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.build_native", description=__doc__)
    parser.add_argument("--verbose", action="store_true", help="show the compiler commands")
    args = parser.parse_args(argv)
    print(f"mypyc: compiling {len(MODULES)} engine.core and sim modules into {NATIVE_DIR}/ ...",
          flush=True)
    t0 = time.perf_counter()
    path = build(quiet=not args.verbose)
    print(f"mypyc: done in {time.perf_counter() - t0:.0f} s ({path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
