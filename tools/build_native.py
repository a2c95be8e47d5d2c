"""Compile engine/core and the simulator's per-step modules with mypyc (``make native``).

The core is mypy-strict Python; mypyc turns its classes into C structs and its methods into
C functions, which is what lets the simulator reach its speed target (``make bench``). The
Python sources stay the reference: the compiled modules in ``build/native`` are loaded only
while its manifest matches the sources byte for byte and the running Python, and
``LOOPSERVE_NATIVE=0`` turns them off (``engine/_native.py``).

The build is profile-guided: an instrumented build runs a training workload
(``tools/native_training.py``) and the compiler lays out the final build by its counters;
``--no-pgo`` compiles once, without them (docs/performance.md measures both).
The build goes to a temp dir beside ``build/native`` and is renamed into place when complete.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# engine from its sources, whatever build is there now; the setting is put back after (the
# training run and an importer's other code choose for themselves).
_previous = os.environ.get("LOOPSERVE_NATIVE")
os.environ["LOOPSERVE_NATIVE"] = "0"
from engine._native import (  # noqa: E402
    GROUP_NAME,
    MANIFEST,
    NATIVE_DIR,
    REPO_ROOT,
    source_digest,
    source_path,
)

if _previous is None:
    del os.environ["LOOPSERVE_NATIVE"]
else:
    os.environ["LOOPSERVE_NATIVE"] = _previous

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


# Calls between the build's own functions bind directly instead of through the PLT (they
# are exported from one shared library); calls into libpython go through the GOT.
PORTABLE_FLAGS = ("-fno-semantic-interposition", "-fno-plt")
PGO_GENERATE = "-fprofile-generate={}"
PGO_USE = ("-fprofile-use={}", "-fprofile-correction", "-fprofile-partial-training",
           "-Wno-missing-profile")


def _compile(ext_modules: list[Any], work: Path, flags: Sequence[str], *, quiet: bool) -> Path:
    """Compile the generated C with ``flags`` added to what mypyc asks for (compiler and
    linker) into ``work/lib``. Both passes of a profile-guided build use the same object
    paths, which name the profiles."""
    from setuptools import setup

    for sub in ("lib", "o"):
        shutil.rmtree(work / sub, ignore_errors=True)
    built = []
    for ext in ext_modules:
        ext = copy.copy(ext)
        ext.extra_compile_args = [*ext.extra_compile_args, *flags]
        ext.extra_link_args = [*ext.extra_link_args, *flags]
        built.append(ext)
    args = ["build_ext", "--build-lib", str(work / "lib"), "--build-temp", str(work / "o"),
            "-j", "2"]
    if quiet:
        args.insert(0, "--quiet")
    setup(name="loopserve-native", ext_modules=built, script_args=args)
    return work / "lib"


def _write_manifest(lib: Path, kind: str) -> None:
    """The manifest ``engine._native`` checks; ``build`` says how it was compiled:
    "profile-guided", "plain" or "instrumented" (the training's)."""
    manifest = {
        "build": kind,
        "cache_tag": sys.implementation.cache_tag,
        "modules": list(MODULES),
        "sources": {str(p.relative_to(REPO_ROOT)): source_digest(p) for p in sources()},
    }
    (lib / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def _train(lib: Path, profile_dir: Path) -> None:
    """Run the training workload on the instrumented build in ``lib``; raises RuntimeError
    when it fails or leaves no profile."""
    env = {**os.environ, "LOOPSERVE_NATIVE": "1", "LOOPSERVE_NATIVE_DIR": str(lib)}
    out = subprocess.run([sys.executable, "-m", "tools.native_training"], env=env,
                         cwd=REPO_ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        raise RuntimeError("training run failed: "
                           + (lines[-1] if lines else f"exit status {out.returncode}"))
    if not any(profile_dir.rglob("*.gcda")):
        raise RuntimeError("training run wrote no profile (a compiler without gcc's "
                           "-fprofile-generate?)")


def build(out_dir: Path = NATIVE_DIR, *, quiet: bool = True, pgo: bool = True) -> Path:
    """Compile MODULES and atomically replace ``out_dir``; returns the manifest path.

    With ``pgo``, an instrumented build first runs ``tools.native_training`` and the final
    build is compiled with its profile; if any part of that fails, the build falls back to
    one without a profile and says why."""
    from mypyc.build import mypycify

    paths = [str(source_path(m)) for m in MODULES]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".native-", dir=out_dir.parent))
    try:
        ext_modules = mypycify(paths, group_name=GROUP_NAME, target_dir=str(work / "c"))

        def compile_with(flags: Sequence[str]) -> Path:
            return _compile(ext_modules, work, [*PORTABLE_FLAGS, *flags], quiet=quiet)

        lib = None
        if pgo:
            profile_dir = work / "profile"
            try:
                print("mypyc: 1/3 the instrumented build", flush=True)
                gen = compile_with([PGO_GENERATE.format(profile_dir)])
                _write_manifest(gen, "instrumented")
                print("mypyc: 2/3 its training run (tools/native_training.py)", flush=True)
                _train(gen, profile_dir)
                print("mypyc: 3/3 the build, compiled with the training's profile", flush=True)
                lib = compile_with([f.format(profile_dir) for f in PGO_USE])
                kind = "profile-guided"
            except (RuntimeError, SystemExit, OSError) as e:
                print(f"mypyc: building without a profile ({e})", flush=True)
                lib = None
        if lib is None:
            lib, kind = compile_with([]), "plain"
        _write_manifest(lib, kind)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        lib.rename(out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out_dir / MANIFEST


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.build_native", description=__doc__)
    parser.add_argument("--verbose", action="store_true", help="show the compiler commands")
    parser.add_argument("--no-pgo", dest="pgo", action="store_false",
                        help="skip the profile-guided pass (an instrumented build, its "
                             "training run, a second compile): faster to build, slower to run")
    args = parser.parse_args(argv)
    print(f"mypyc: compiling {len(MODULES)} engine.core and sim modules into {NATIVE_DIR}/ ...",
          flush=True)
    t0 = time.perf_counter()
    path = build(quiet=not args.verbose, pgo=args.pgo)
    print(f"mypyc: done in {time.perf_counter() - t0:.0f} s ({path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
