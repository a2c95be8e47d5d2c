"""``make gpu-check``: one prepared script that turns a rare GPU lease into measured results.

Stages, in order, each time-capped and failure-isolated (a failing stage is reported and the
next one runs; the exit status is non-zero at the end if any failed):

1. ``wheels``    install carried wheels (``.whl/``, ``make gpu-wheels``) into /tmp/site, check
                 the imports the project needs;
2. ``env``       GPU name, memory, driver, torch/triton/python versions, commit -> env.json;
3. ``ceilings``  device-to-device copy bandwidth and a bf16 matmul (CUDA events);
4. ``pytest``    ``pytest -m gpu``;
5. ``core``      recurrent core call time at 1/8/32 decode rows against the weight floor;
6. ``runs``      ``loopserve run scenarios/gpu-check.yaml`` on the device and in simulation,
                 then ``loopserve report`` of both, packed as runs.tar.gz;
7. ``calibrate`` ``loopserve calibrate`` when the command exists.

Results go to ``$OUT`` when set, else ``results/gpu/<date>/`` (``results/gpu-dryrun/`` for the
CPU dry run), within the device machine's limits (8 files, 16 MiB each, 2 folders deep); a
short table is printed last. ``--device cpu`` is the dry run: the same stages with the
``tiny`` model and tiny sizes, run by CI through tests/test_gpu_check.py.

The script itself uses the standard library only; torch and the project run in subprocesses.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tools import gpu_outputs, gpu_stages, gpu_wheels
from tools.gpu_proc import NotAvailable, Proc, StageFailed, require, run_streaming

REPO = Path(__file__).resolve().parent.parent
_LOOPSERVE = "import sys; from loopserve.cli import main; sys.argv[0] = 'loopserve'; " \
             "sys.exit(main())"
FINALIZE_RESERVE_S = 5.0  # kept back from the budget for writing the outputs
MIN_CAP_S = 5.0  # a stage whose cap comes out shorter is skipped


@dataclass
class StageResult:
    """How one stage ended, for gpu_check.json and the table."""

    name: str
    status: str  # ok | failed | n/a | skipped
    seconds: float
    detail: str


@dataclass
class Check:
    """One gpu-check run: options, output folder, log and everything measured."""

    device: str
    out: Path
    budget_s: float
    wheels_dir: Path
    site_dir: Path
    only: set[str] | None
    scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpu-check-")))
    results: dict[str, Any] = field(default_factory=dict)
    stages: list[StageResult] = field(default_factory=list)
    extra_path: list[str] = field(default_factory=list)
    start: float = field(default_factory=time.monotonic)
    log_file: TextIO | None = None
    cuda_ok: bool = True

    @property
    def dry(self) -> bool:
        return self.device != "cuda"

    # ---- output ----------------------------------------------------------------------------
    def say(self, msg: str) -> None:
        """Print a timestamped progress line and log it."""
        line = f"[{time.strftime('%H:%M:%S')} +{time.monotonic() - self.start:6.1f}s] {msg}"
        print(line, flush=True)
        self.log(line)

    def log(self, line: str) -> None:
        # The log stays under the per-file limit whatever a subprocess prints.
        if self.log_file is not None and self.log_file.tell() < gpu_outputs.MAX_FILE_BYTES - 2**20:
            self.log_file.write(line + "\n")
            self.log_file.flush()

    # ---- subprocesses ------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1", MPLBACKEND="Agg")
        if self.dry:  # tiny model: threads only add contention noise on a shared CPU
            env.setdefault("OMP_NUM_THREADS", "1")
        paths = [*self.extra_path, str(REPO)]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        return env

    def sh(self, cmd: list[str], timeout: float, *, echo: bool = True) -> Proc:
        """Run ``cmd`` in the repo under the cap, echoing (unless ``echo`` is false) and
        logging its output."""
        self.log("$ " + " ".join(cmd))
        return run_streaming(cmd, cwd=REPO, env=self.env(), timeout=timeout,
                             emit=self._echo if echo else None)

    def _echo(self, text: str) -> None:
        print(f"    | {text}", flush=True)
        self.log(f"    | {text}")

    def python(self, args: list[str], timeout: float, *, echo: bool = True) -> Proc:
        return self.sh([sys.executable, *args], timeout, echo=echo)

    def loopserve(self, args: list[str], timeout: float, *, echo: bool = True) -> Proc:
        """The ``loopserve`` command (no console script on the GPU machine: call its main)."""
        return self.python(["-c", _LOOPSERVE, *args], timeout, echo=echo)

    def measure(self, what: str, timeout: float, extra: tuple[str, ...] = ()) -> dict[str, Any]:
        """Run a ``tools.gpu_measure`` subcommand; its JSON result."""
        dest = self.scratch / f"{what}.json"
        proc = self.python(["-m", "tools.gpu_measure", what, "--device", self.device,
                            "--json", str(dest), *extra], timeout)
        require(proc, f"gpu_measure {what}")
        return dict(json.loads(dest.read_text()))

    # ---- driver ------------------------------------------------------------------------------
    def run_stage(self, spec: gpu_stages.StageSpec, later: list[gpu_stages.StageSpec]) -> None:
        fn: Callable[[Check, float], str] = getattr(gpu_stages, spec.name)
        if not spec.selected(self.only):
            why = "not in --only" if self.only is not None else "runs only with --only"
            self.stages.append(StageResult(spec.name, "skipped", 0.0, why))
            return
        left = self.budget_s - (time.monotonic() - self.start) - FINALIZE_RESERVE_S
        reserve = sum(s.reserve for s in later if s.selected(self.only))
        cap = min(spec.cap_cpu if self.dry else spec.cap_cuda, left - reserve)
        if cap < MIN_CAP_S:
            self.stages.append(StageResult(spec.name, "skipped", 0.0, "no time left in budget"))
            self.say(f"== {spec.name}: skipped (no time left in the budget)")
            return
        self.say(f"== {spec.name} (cap {cap:.0f}s)")
        t0 = time.monotonic()
        try:
            status, detail = "ok", fn(self, cap)
        except NotAvailable as err:
            status, detail = "n/a", str(err)
        except StageFailed as err:
            status, detail = "failed", str(err)
        except Exception as err:  # noqa: BLE001 - one stage's bug must not end the check
            status, detail = "failed", f"{type(err).__name__}: {err}"
        result = StageResult(spec.name, status, time.monotonic() - t0, detail)
        self.stages.append(result)
        self.say(f"== {spec.name}: {status} in {result.seconds:.1f}s: {detail}")

    def run(self) -> int:
        """Every stage in order, then the outputs and the table; the exit status."""
        self.out.mkdir(parents=True, exist_ok=True)
        log_file = self.log_file = (self.out / "log.txt").open("w")
        self.results.update(device=self.device, date=time.strftime("%Y-%m-%d"),
                            commit=gpu_wheels.read_commit(self.wheels_dir), budget_s=self.budget_s,
                            output=str(self.out))
        if sys.version_info[:2] == (3, 12) and any(self.site_dir.glob("*.dist-info")):
            # A rerun with --only on a warm machine: the first run's wheels are still there.
            self.extra_path.append(str(self.site_dir))
        self.say(f"gpu-check on {self.device}{' (DRY RUN)' if self.dry else ''}: commit "
                 f"{self.results['commit']}, budget {self.budget_s:.0f}s, results -> {self.out}")
        try:
            for i, spec in enumerate(gpu_stages.STAGES):
                self.run_stage(spec, list(gpu_stages.STAGES[i + 1:]))
            return self.finish()
        finally:
            log_file.close()
            shutil.rmtree(self.scratch, ignore_errors=True)

    def finish(self) -> int:
        """Write gpu_check.json and summary.txt, check the output limits, print the table."""
        self.results["stages"] = [vars(s) for s in self.stages]
        self.results["total_s"] = round(time.monotonic() - self.start, 1)
        table = gpu_outputs.final_table(self.results)
        (self.out / "gpu_check.json").write_text(
            json.dumps(self.results, indent=2, default=str) + "\n")
        (self.out / "summary.txt").write_text(table + "\n")
        failed = [s.name for s in self.stages if s.status == "failed"]
        self.say(f"results in {self.out} ({self.results['total_s']}s); "
                 f"{'FAILED: ' + ', '.join(failed) if failed else 'no stage failed'}")
        self.log(table)
        problems = gpu_outputs.limit_problems(self.out)
        for p in problems:
            print(f"output limit: {p}", flush=True)
        print(table, flush=True)
        return 1 if failed or problems else 0


def default_out(device: str) -> Path:
    """$OUT when set; else results/gpu/<date>/ (a fresh suffix when taken), or
    results/gpu-dryrun/ (emptied) for the dry run."""
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"])
    if device != "cuda":
        out = REPO / "results" / "gpu-dryrun"
        shutil.rmtree(out, ignore_errors=True)
        return out
    base = REPO / "results" / "gpu" / time.strftime("%Y-%m-%d")
    out, n = base, 1
    while out.exists() and any(out.iterdir()):
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gpu_check",
                                 description="the one prepared script for a lent GPU")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda on the GPU machine; cpu for the dry run (tiny model)")
    ap.add_argument("--out", type=Path, help="results folder (default $OUT, else results/gpu/"
                    "<date>/, or results/gpu-dryrun/ for --device cpu)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="total time budget (default 450 on cuda, 240 on cpu)")
    ap.add_argument("--only", help="comma-separated stages to run (a rerun of some), from: "
                    + ",".join(s.name for s in gpu_stages.STAGES))
    ap.add_argument("--wheels", type=Path, default=gpu_wheels.WHEEL_DIR,
                    help="folder of carried wheels (default .whl/)")
    ap.add_argument("--site", type=Path, default=None,
                    help="install target for the wheels (default /tmp/site on cuda)")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    unknown = (only or set()) - {s.name for s in gpu_stages.STAGES}
    if unknown:
        ap.error(f"--only: unknown stage(s) {', '.join(sorted(unknown))}")
    budget = args.budget_s or (450.0 if args.device == "cuda" else 240.0)
    need = FINALIZE_RESERVE_S + sum(s.reserve for s in gpu_stages.STAGES
                                    if s.selected(only))
    if budget < need:
        ap.error(f"--budget-s: {budget:.0f}s is less than the {need:.0f}s the selected stages "
                 "reserve; raise it or run fewer stages with --only")
    check = Check(
        device=args.device,
        out=(args.out or default_out(args.device)).resolve(),
        budget_s=budget,
        wheels_dir=args.wheels,
        site_dir=args.site or gpu_wheels.SITE_DIR,
        only=only,
    )
    if args.device != "cuda" and args.site is None:
        check.site_dir = check.scratch / "site"
    return check.run()


if __name__ == "__main__":
    sys.exit(main())
