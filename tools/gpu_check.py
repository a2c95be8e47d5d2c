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
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools import gpu_outputs, gpu_wheels

REPO = Path(__file__).resolve().parent.parent
SCENARIO = "scenarios/gpu-check.yaml"
# The dry run shrinks the scenario to the tiny model and a few dozen tokens.
DRY_RUN_SETS = (
    "model=tiny", "workload.decode_population=4", "workload.decode_output_tokens=24",
    "workload.inject=[{at_decode_tokens: 6, prompt_tokens: 96, output_tokens: 4}]",
    "scheduler.max_num_seqs=8", "scheduler.max_num_batched_tokens=64",
    "scheduler.prefill_chunk_size=32",
)
REQUIRED_IMPORTS = ("simpy", "pydantic", "yaml", "numpy", "pandas", "matplotlib", "tqdm",
                    "torch", "pytest")
OPTIONAL_IMPORTS = ("triton", "hypothesis")
# A module of this project that is missing means the piece has not landed yet (not a failure).
_NOT_LANDED = re.compile(r"No module named '((?:engine|sim|loopserve|kernels)(?:\.\w+)*)'")
_LOOPSERVE = "import sys; from loopserve.cli import main; sys.argv[0] = 'loopserve'; " \
             "sys.exit(main())"


@dataclass(frozen=True)
class StageSpec:
    """A stage: its cap in seconds on CUDA and on CPU, and the time it keeps in reserve."""

    name: str
    cap_cuda: float
    cap_cpu: float
    reserve: float


STAGES = (
    StageSpec("wheels", 60, 60, 5),
    StageSpec("env", 45, 45, 5),
    StageSpec("ceilings", 60, 45, 10),
    StageSpec("pytest", 120, 90, 20),
    StageSpec("core", 90, 60, 20),
    StageSpec("runs", 240, 120, 60),
    StageSpec("calibrate", 120, 60, 20),
)
FINALIZE_RESERVE_S = 5.0


class StageFailed(Exception):
    """A stage failed; the message is its one-line detail."""


class NotAvailable(Exception):
    """What the stage needs has not landed in this commit (reported as n/a, not a failure)."""


@dataclass
class Proc:
    """A finished subprocess: exit status, merged output and whether it ran out of time."""

    rc: int
    output: str
    timed_out: bool

    def tail(self, n: int = 3) -> str:
        lines = [ln for ln in self.output.splitlines() if ln.strip()]
        return " | ".join(lines[-n:])[-300:]


@dataclass
class StageResult:
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
    log_file: Any = None
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
        """Run ``cmd`` in the repo, echoing its output live (unless ``echo`` is false); killed
        (its whole process group) after ``timeout`` seconds. Progress-bar redraws are echoed at
        most every 10 s."""
        self.log("$ " + " ".join(cmd))
        proc = subprocess.Popen(cmd, cwd=REPO, env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        kept: list[str] = []
        assert proc.stdout is not None
        reader = threading.Thread(target=self._pump, args=(proc.stdout.fileno(), kept, echo),
                                  daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=5)
        proc.stdout.close()
        return Proc(proc.returncode, "\n".join(kept), timed_out)

    def _pump(self, fd: int, kept: list[str], echo: bool) -> None:
        buf = b""
        last_bar = 0.0
        while chunk := os.read(fd, 65536):
            buf += chunk
            while (m := re.search(rb"[\r\n]", buf)) is not None:
                seg, is_bar, buf = buf[: m.start()], buf[m.start()] == 13, buf[m.end():]
                text = seg.decode(errors="replace").rstrip()
                if not text.strip():
                    continue
                if is_bar:
                    if time.monotonic() - last_bar < 10:
                        continue
                    last_bar = time.monotonic()
                else:
                    kept.append(text)
                if echo:
                    print(f"    | {text}", flush=True)
                    self.log(f"    | {text}")
        if buf.strip():
            kept.append(buf.decode(errors="replace").rstrip())
            if echo:
                print(f"    | {kept[-1]}", flush=True)
                self.log(f"    | {kept[-1]}")

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

    # ---- stages ------------------------------------------------------------------------------
    def stage_wheels(self, cap: float) -> str:
        wheels = sorted(self.wheels_dir.glob("*.whl")) if self.wheels_dir.is_dir() else []
        notes = []
        if not wheels:
            notes.append(f"no wheels in {self.wheels_dir.name}/")
        else:
            cmd = gpu_wheels.install_command(wheels, self.site_dir)
            # Wheels are built for the GPU image's Python 3.12; elsewhere (the dry run on 3.11)
            # install them for that target without putting them on the path.
            native = sys.version_info[:2] == (3, 12)
            if not native:
                cmd[-len(wheels):-len(wheels)] = [
                    "--only-binary=:all:", "--python-version", gpu_wheels.PYTHON_VERSION,
                    "--implementation", "cp",
                    *[a for p in gpu_wheels.PLATFORMS for a in ("--platform", p)]]
            require(self.sh(cmd, cap / 2), "pip install of the carried wheels")
            installed = sorted(p.name for p in self.site_dir.glob("*.dist-info"))
            if native:
                self.extra_path.insert(0, str(self.site_dir))
                sys.path.insert(0, str(self.site_dir))
            notes.append(f"{len(wheels)} wheels -> {self.site_dir}"
                         + ("" if native else " (cp312 target, not on this Python's path)"))
            self.results["wheels"] = {"files": [p.name for p in wheels], "installed": installed,
                                      "on_path": native}
        imports = self.check_imports(cap / 2)
        missing = [m for m in REQUIRED_IMPORTS if imports.get(m) is None]
        self.say("imports: " + ", ".join(f"{m} {v or 'MISSING'}" for m, v in imports.items()))
        opt = ", ".join(f"{m} {imports.get(m) or 'missing'}" for m in OPTIONAL_IMPORTS)
        if missing:
            raise StageFailed("; ".join(notes) + f"; MISSING {', '.join(missing)} "
                              "(carry them: make gpu-wheels, carry .whl)")
        return "; ".join(notes) + f"; imports ok ({opt})"

    def check_imports(self, timeout: float) -> dict[str, str | None]:
        code = (
            "import importlib, json, sys\nout = {}\n"
            f"for m in {list(REQUIRED_IMPORTS + OPTIONAL_IMPORTS)!r}:\n"
            "    try:\n        mod = importlib.import_module(m)\n"
            "        out[m] = str(getattr(mod, '__version__', 'ok'))\n"
            "    except Exception:\n        out[m] = None\n"
            "print('IMPORTS ' + json.dumps(out))\n"
        )
        proc = self.python(["-c", code], timeout, echo=False)
        found = re.search(r"^IMPORTS (.*)$", proc.output, re.M)
        if found is None:
            raise StageFailed(f"import check did not report: {proc.tail()}")
        imports: dict[str, str | None] = json.loads(found.group(1))
        self.results["imports"] = imports
        return imports

    def stage_env(self, cap: float) -> str:
        info = self.measure("env", cap)
        self.cuda_ok = bool(info.get("cuda_available")) or self.dry
        info.update(commit=self.results["commit"], date=self.results["date"],
                    dry_run=self.dry, command=[sys.executable, *sys.argv],
                    imports=self.results.get("imports"), wheels=self.results.get("wheels"),
                    budget_s=self.budget_s)
        self.results["env"] = info
        (self.out / "env.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
        gpu = (f"{info.get('gpu')}, {info.get('gpu_memory_gib')} GiB, driver "
               f"{info.get('driver')}" if info.get("gpu") else "no GPU (dry run)")
        return (f"{gpu}, torch {info.get('torch')}, triton {info.get('triton')}, "
                f"python {info.get('python')}")

    def stage_ceilings(self, cap: float) -> str:
        self.need_cuda()
        res = self.measure("ceilings", cap)
        self.results["ceilings"] = res
        return (f"copy {res['copy']['tb_per_s']:.3f} TB/s, matmul "
                f"{res['matmul']['tflop_per_s']:.1f} TFLOP/s [{res['timer']}]")

    def stage_pytest(self, cap: float) -> str:
        xml = self.scratch / "pytest-gpu.xml"
        proc = self.python(["-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                            f"--junitxml={xml}"], cap)
        counts = junit_counts(xml) if xml.is_file() else None
        self.results["pytest"] = {"rc": proc.rc, "counts": counts, "timed_out": proc.timed_out}
        status, detail = pytest_verdict(proc.rc, counts, cuda=not self.dry,
                                        timed_out=proc.timed_out)
        if status != "ok":
            raise StageFailed(f"{detail}: {proc.tail()}")
        return detail

    def stage_core(self, cap: float) -> str:
        self.need_cuda()
        if importlib.util.find_spec("engine.model") is None:
            raise NotAvailable("engine.model: not available in this commit")
        copy = ((self.results.get("ceilings") or {}).get("copy") or {}).get("bytes_per_s")
        extra = ("--copy-bps", repr(copy)) if copy else ()
        res = self.measure("core", cap, extra)
        self.results["core"] = res
        per = ", ".join(f"{r['rows']}:{r['median_s'] * 1e3:.3f}" for r in res["model_core"])
        runner = "runner ok" if res.get("runner") else res.get("runner_error", "runner: n/a")
        return f"model core ms by rows {per}; floor {res['floor_s'] * 1e3:.4f} ms; {runner}"

    def stage_runs(self, cap: float) -> str:
        self.need_cuda()
        if importlib.util.find_spec("loopserve.cli") is None:
            raise NotAvailable("loopserve CLI: not available in this commit")
        deadline = time.monotonic() + cap
        helptext = self.loopserve(["run", "--help"], 30, echo=False).output
        common = [SCENARIO] + (["--no-progress"] if "--no-progress" in helptext else [])
        if self.dry:
            common += [a for s in DRY_RUN_SETS for a in ("--set", s)]
        runs = self.scratch / "runs"
        target = "cuda" if not self.dry else "cpu"
        dirs: dict[str, Path] = {}
        notes, failures = [], []
        # The simulation is cheap: it runs inside its own slice of the cap, after the device run.
        for name, tgt, share in ((target, target, 0.75), ("sim", "sim", 0.8)):
            left = deadline - time.monotonic()
            proc = self.loopserve(["run", *common, "--target", tgt, "--out",
                                   str(runs / name)], left * share)
            run_dir = gpu_outputs.find_run_dir(runs / name) if (runs / name).is_dir() else None
            missing = _NOT_LANDED.search(proc.output)
            if proc.rc == 0 and run_dir is not None:
                dirs[name] = run_dir
                notes.append(f"{name} ok")
            elif missing:
                notes.append(f"{name}: {missing.group(1)} not available in this commit")
            else:
                failures.append(f"{name} run {describe(proc)}")
        self.results["ratios"] = {
            key: gpu_outputs.a2_a0_ratios(dirs[name] / "summary.json")
            for key, name in (("measured", target), ("simulated", "sim")) if name in dirs
        }
        if len(dirs) == 2 and importlib.util.find_spec("loopserve.report") is not None:
            proc = self.loopserve(["report", str(dirs[target]), str(dirs["sim"]), "--out",
                                   str(runs / "report")], deadline - time.monotonic())
            if proc.rc == 0:
                notes.append("report ok")
            else:
                failures.append(f"report {describe(proc)}")
        if runs.is_dir() and any(runs.iterdir()):
            dropped = gpu_outputs.pack(self.out / "runs.tar.gz",
                                       {p.name: p for p in sorted(runs.iterdir()) if p.is_dir()})
            notes.append("packed runs.tar.gz"
                         + (f" without {', '.join(dropped)}" if dropped else ""))
        if failures:
            raise StageFailed("; ".join(failures + notes))
        if not dirs:
            raise NotAvailable("; ".join(notes))
        return "; ".join(notes)

    def stage_calibrate(self, cap: float) -> str:
        self.need_cuda()
        if importlib.util.find_spec("loopserve.cli") is None:
            raise NotAvailable("calibrate: not available in this commit")
        top = self.loopserve(["--help"], 30, echo=False).output
        if not re.search(r"\bcalibrate\b", top):
            raise NotAvailable("calibrate: not available in this commit")
        helptext = self.loopserve(["calibrate", "--help"], 30, echo=False).output
        dest = self.scratch / "calibrate"
        model = "tiny" if self.dry else "ouro-1.4b"
        args = ["calibrate", "--target", self.device, "--model", model]
        if "--out" in helptext:
            args += ["--out", str(dest)]
        profiles = REPO / "results" / "profiles"
        before = {p: p.read_bytes() for p in profiles.glob("*.json")} if profiles.is_dir() else {}
        proc = self.loopserve(args, cap - 5)
        after = {p: p.read_bytes() for p in profiles.glob("*.json")} if profiles.is_dir() else {}
        changed = [p for p, data in after.items() if before.get(p) != data]  # new or rewritten
        folders = {"calibrate": dest} if dest.is_dir() else {}
        if changed:
            keep = self.scratch / "profiles"
            keep.mkdir(exist_ok=True)
            for p in changed:
                shutil.copy2(p, keep / p.name)
                if self.dry:  # a dry run must not leave a tiny-model profile in the tree
                    p.write_bytes(before[p]) if p in before else p.unlink()
            folders["profiles"] = keep
        if folders:
            gpu_outputs.pack(self.out / "calibrate.tar.gz", folders)
        require(proc, "loopserve calibrate")
        return f"calibrated; {len(changed)} profile(s) written" + (
            "; packed calibrate.tar.gz" if folders else "")

    def need_cuda(self) -> None:
        if not self.cuda_ok:
            raise StageFailed("CUDA is not available on this machine (use --device cpu for "
                              "the dry run)")

    # ---- driver ------------------------------------------------------------------------------
    def run_stage(self, spec: StageSpec, later: list[StageSpec]) -> None:
        fn: Callable[[float], str] = getattr(self, f"stage_{spec.name}")
        if self.only is not None and spec.name not in self.only:
            self.stages.append(StageResult(spec.name, "skipped", 0.0, "not in --only"))
            return
        left = self.budget_s - (time.monotonic() - self.start) - FINALIZE_RESERVE_S
        reserve = sum(s.reserve for s in later if self.only is None or s.name in self.only)
        cap = min(spec.cap_cpu if self.dry else spec.cap_cuda, left - reserve)
        if cap < min(5.0, spec.reserve):
            self.stages.append(StageResult(spec.name, "skipped", 0.0, "no time left in budget"))
            self.say(f"== {spec.name}: skipped (no time left in the budget)")
            return
        self.say(f"== {spec.name} (cap {cap:.0f}s)")
        t0 = time.monotonic()
        try:
            status, detail = "ok", fn(cap)
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
        self.out.mkdir(parents=True, exist_ok=True)
        self.log_file = (self.out / "log.txt").open("w")
        self.results.update(device=self.device, date=time.strftime("%Y-%m-%d"),
                            commit=commit_id(self.wheels_dir), budget_s=self.budget_s,
                            output=str(self.out))
        self.say(f"gpu-check on {self.device}{' (DRY RUN)' if self.dry else ''}: commit "
                 f"{self.results['commit']}, budget {self.budget_s:.0f}s, results -> {self.out}")
        try:
            for i, spec in enumerate(STAGES):
                self.run_stage(spec, list(STAGES[i + 1:]))
            return self.finish()
        finally:
            self.log_file.close()
            shutil.rmtree(self.scratch, ignore_errors=True)

    def finish(self) -> int:
        self.results["stages"] = [vars(s) for s in self.stages]
        self.results["total_s"] = round(time.monotonic() - self.start, 1)
        table = gpu_outputs.final_table(self.results)
        (self.out / "gpu_check.json").write_text(
            json.dumps(self.results, indent=2, default=str) + "\n")
        (self.out / "summary.txt").write_text(table + "\n")
        self.log(table)
        self.log_file.flush()
        problems = gpu_outputs.limit_problems(self.out)
        failed = [s.name for s in self.stages if s.status == "failed"]
        for p in problems:
            print(f"output limit: {p}", flush=True)
        print(f"\nresults in {self.out} ({self.results['total_s']}s); "
              f"{'FAILED: ' + ', '.join(failed) if failed else 'no stage failed'}")
        print(table, flush=True)
        return 1 if failed or problems else 0


# ---- helpers --------------------------------------------------------------------------------
def require(proc: Proc, what: str) -> None:
    """Raise StageFailed unless ``proc`` exited 0."""
    if proc.rc != 0 or proc.timed_out:
        raise StageFailed(f"{what} {describe(proc)}")


def describe(proc: Proc) -> str:
    if proc.timed_out:
        return f"timed out: {proc.tail()}"
    return f"exited {proc.rc}: {proc.tail()}"


def junit_counts(xml: Path) -> dict[str, int]:
    """tests/failures/errors/skipped summed over a JUnit XML file's test suites."""
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in keys}


def pytest_verdict(
    rc: int, counts: dict[str, int] | None, *, cuda: bool, timed_out: bool = False
) -> tuple[str, str]:
    """ok/failed and a detail for ``pytest -m gpu``. Without CUDA every gpu test skips (or none
    is collected, exit 5) and that is fine; on CUDA at least one must pass and none fail."""
    if timed_out:
        return "failed", "pytest -m gpu timed out"
    if counts is None:
        return "failed", f"pytest -m gpu exited {rc} without a report"
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    detail = (f"{passed} passed, {counts['skipped']} skipped, {counts['failures']} failed, "
              f"{counts['errors']} errors")
    if counts["failures"] or counts["errors"] or rc not in (0, 5):
        return "failed", f"pytest -m gpu exited {rc}: {detail}"
    if cuda and passed == 0:
        return "failed", f"no gpu test passed on CUDA ({detail})"
    if rc == 5 or counts["tests"] == 0:
        return "ok", "no gpu tests collected"
    return "ok", detail + ("" if cuda else " (no CUDA: gpu tests skip)")


def commit_id(wheels_dir: Path) -> str:
    """HEAD (``-dirty`` with local changes) from git, else a COMMIT file (the working tree sent
    to the GPU machine has no .git: ``make gpu-wheels`` writes .whl/COMMIT)."""
    try:
        res = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=False)
        if res.returncode == 0 and res.stdout.strip():
            dirty = subprocess.run(
                ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True, text=True, timeout=10, check=False).stdout.strip()
            return res.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    for path in (REPO / "COMMIT", wheels_dir / "COMMIT"):
        if path.is_file():
            return path.read_text().strip() or "unknown"
    return "unknown"


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
    ap = argparse.ArgumentParser(description="the one prepared script for a lent GPU")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda on the GPU machine; cpu for the dry run (tiny model)")
    ap.add_argument("--out", type=Path, help="results folder (default $OUT, else results/gpu/"
                    "<date>/, or results/gpu-dryrun/ for --device cpu)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="total time budget (default 450 on cuda, 240 on cpu)")
    ap.add_argument("--only", help="comma-separated stages to run (a rerun of some), from: "
                    + ",".join(s.name for s in STAGES))
    ap.add_argument("--wheels", type=Path, default=gpu_wheels.WHEEL_DIR,
                    help="folder of carried wheels (default .whl/)")
    ap.add_argument("--site", type=Path, default=None,
                    help="install target for the wheels (default /tmp/site on cuda)")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    unknown = (only or set()) - {s.name for s in STAGES}
    if unknown:
        ap.error(f"--only: unknown stage(s) {', '.join(sorted(unknown))}")
    check = Check(
        device=args.device,
        out=(args.out or default_out(args.device)).resolve(),
        budget_s=args.budget_s or (450.0 if args.device == "cuda" else 240.0),
        wheels_dir=args.wheels,
        site_dir=args.site or gpu_wheels.SITE_DIR,
        only=only,
    )
    if args.device != "cuda" and args.site is None:
        check.site_dir = check.scratch / "site"
    return check.run()


if __name__ == "__main__":
    sys.exit(main())
