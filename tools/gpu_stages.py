"""The stages of ``tools.gpu_check``, in order (see that module). Each takes the running
``Check`` and its time cap in seconds and returns a one-line detail, or raises StageFailed
(reported, the next stage still runs) or NotAvailable (the piece has not landed: n/a).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tools import gpu_outputs, gpu_wheels
from tools.gpu_proc import NotAvailable, StageFailed, require

if TYPE_CHECKING:
    from tools.gpu_check import Check

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
# A time-budget option of `loopserve calibrate`, if it offers one, gets the stage's cap.
_BUDGET_FLAG = re.compile(r"(--(?:budget|time-limit|max-time|max-seconds)[\w-]*)")


@dataclass(frozen=True)
class StageSpec:
    """A stage: its cap in seconds on CUDA and on CPU, and the time it keeps in reserve.
    A stage that is not ``default`` runs only when ``--only`` names it."""

    name: str
    cap_cuda: float
    cap_cpu: float
    reserve: float
    default: bool = True

    def selected(self, only: set[str] | None) -> bool:
        return self.default if only is None else self.name in only


STAGES = (
    StageSpec("wheels", 60, 60, 5),
    StageSpec("env", 45, 45, 5),
    StageSpec("ceilings", 60, 45, 10),
    StageSpec("pytest", 120, 90, 20),
    StageSpec("core", 90, 60, 20),
    StageSpec("runs", 240, 120, 60),
    StageSpec("calibrate", 120, 60, 20),
    # Needs the calibrate stage's profile, and its own budget on a GPU: a second call,
    # `--only calibrate,fidelity --budget-s 400` (docs/gpu.md).
    StageSpec("fidelity", 240, 60, 20, default=False),
)


def wheels(c: Check, cap: float) -> str:
    """Install the carried wheels offline, then check the imports the project needs."""
    files = sorted(c.wheels_dir.glob("*.whl")) if c.wheels_dir.is_dir() else []
    notes = []
    if not files:
        notes.append(f"no wheels in {c.wheels_dir.name}/")
    else:
        cmd = gpu_wheels.install_command(files, c.site_dir)
        # Wheels are built for the GPU image's Python 3.12; elsewhere (the dry run on 3.11)
        # install them for that target without putting them on the path.
        native = sys.version_info[:2] == (3, 12)
        if not native:
            cmd[-len(files):-len(files)] = [
                "--only-binary=:all:", "--python-version", gpu_wheels.PYTHON_VERSION,
                "--implementation", "cp",
                *[a for p in gpu_wheels.PLATFORMS for a in ("--platform", p)]]
        require(c.sh(cmd, cap / 2), "pip install of the carried wheels")
        installed = sorted(p.name for p in c.site_dir.glob("*.dist-info"))
        if native and str(c.site_dir) not in c.extra_path:
            c.extra_path.insert(0, str(c.site_dir))
        notes.append(f"{len(files)} wheels -> {c.site_dir}"
                     + ("" if native else " (cp312 target, not on this Python's path)"))
        c.results["wheels"] = {"files": [p.name for p in files], "installed": installed,
                               "on_path": native}
    imports = check_imports(c, cap / 2)
    missing = [m for m in REQUIRED_IMPORTS if imports.get(m) is None]
    c.say("imports: " + ", ".join(f"{m} {v or 'MISSING'}" for m, v in imports.items()))
    opt = ", ".join(f"{m} {imports.get(m) or 'missing'}" for m in OPTIONAL_IMPORTS)
    if missing:
        raise StageFailed("; ".join(notes) + f"; MISSING {', '.join(missing)} "
                          "(carry them as wheels: make gpu-wheels, carry .whl; docs/gpu.md)")
    return "; ".join(notes) + f"; imports ok ({opt})"


def check_imports(c: Check, timeout: float) -> dict[str, str | None]:
    """Module -> version (None when it does not import), as the subprocesses will see them."""
    code = (
        "import importlib, json, sys\nout = {}\n"
        f"for m in {list(REQUIRED_IMPORTS + OPTIONAL_IMPORTS)!r}:\n"
        "    try:\n        mod = importlib.import_module(m)\n"
        "        out[m] = str(getattr(mod, '__version__', 'ok'))\n"
        "    except Exception:\n        out[m] = None\n"
        "print('IMPORTS ' + json.dumps(out))\n"
    )
    proc = c.python(["-c", code], timeout, echo=False)
    found = re.search(r"^IMPORTS (.*)$", proc.output, re.M)
    if found is None:
        raise StageFailed(f"import check did not report: {proc.tail()}")
    imports: dict[str, str | None] = json.loads(found.group(1))
    c.results["imports"] = imports
    return imports


def env(c: Check, cap: float) -> str:
    """Device facts plus commit, imports and wheels -> env.json."""
    c.cuda_ok = c.dry  # until the device answered
    info = c.measure("env", cap)
    c.cuda_ok = bool(info.get("cuda_available")) or c.dry
    info.update(commit=c.results.get("commit"), date=c.results.get("date"),
                dry_run=c.dry, command=[sys.executable, *sys.argv],
                imports=c.results.get("imports"), wheels=c.results.get("wheels"),
                budget_s=c.budget_s)
    c.results["env"] = info
    (c.out / "env.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    gpu = (f"{info.get('gpu')}, {info.get('gpu_memory_gib')} GiB, driver "
           f"{info.get('driver')}" if info.get("gpu") else "no GPU (dry run)")
    return (f"{gpu}, torch {info.get('torch')}, triton {info.get('triton')}, "
            f"python {info.get('python')}")


def ceilings(c: Check, cap: float) -> str:
    """Copy bandwidth and bf16 matmul rate, measured once."""
    need_cuda(c)
    res = c.measure("ceilings", cap)
    c.results["ceilings"] = res
    return (f"copy {res['copy']['tb_per_s']:.3f} TB/s, matmul "
            f"{res['matmul']['tflop_per_s']:.1f} TFLOP/s [{res['timer']}]")


def pytest(c: Check, cap: float) -> str:
    """``pytest -m gpu``, judged from its JUnit report."""
    xml = c.scratch / "pytest-gpu.xml"
    proc = c.python(["-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                     f"--junitxml={xml}"], cap)
    counts = gpu_outputs.junit_counts(xml) if xml.is_file() else None
    c.results["pytest"] = {"rc": proc.rc, "counts": counts, "timed_out": proc.timed_out}
    status, detail = gpu_outputs.pytest_verdict(proc.rc, counts, cuda=not c.dry,
                                                timed_out=proc.timed_out)
    if status != "ok":
        raise StageFailed(f"{detail}: {proc.tail()}")
    return detail


def core(c: Check, cap: float) -> str:
    """Core call times at 1/8/32 decode rows against the floor from the measured copy rate."""
    need_cuda(c)
    if importlib.util.find_spec("engine.model") is None:
        raise NotAvailable("engine.model: not available in this commit")
    copy = ((c.results.get("ceilings") or {}).get("copy") or {}).get("bytes_per_s")
    extra = ("--copy-bps", repr(copy)) if copy else ()
    res = c.measure("core", cap, extra)
    c.results["core"] = res
    per = ", ".join(f"{r['rows']}:{r['median_s'] * 1e3:.3f}" for r in res["model_core"])
    runner = "runner ok" if res.get("runner") else res.get("runner_error", "runner: n/a")
    return f"model core ms by rows {per}; floor {res['floor_s'] * 1e3:.4f} ms; {runner}"


def runs(c: Check, cap: float) -> str:
    """The scenario on the device and in simulation, the side-by-side report, A2/A0 ratios;
    the run folders packed as runs.tar.gz."""
    need_cuda(c)
    if importlib.util.find_spec("loopserve.cli") is None:
        raise NotAvailable("loopserve CLI: not available in this commit")
    deadline = time.monotonic() + cap
    helptext = c.loopserve(["run", "--help"], 30, echo=False).output
    common = [SCENARIO] + (["--no-progress"] if "--no-progress" in helptext else [])
    if c.dry:
        common += [a for s in DRY_RUN_SETS for a in ("--set", s)]
    root = c.scratch / "runs"
    target = "cuda" if not c.dry else "cpu"
    dirs: dict[str, Path] = {}
    notes, failures = [], []
    # The simulation is cheap: it runs inside its own slice of the cap, after the device run.
    for name, tgt, share in ((target, target, 0.75), ("sim", "sim", 0.8)):
        left = deadline - time.monotonic()
        proc = c.loopserve(["run", *common, "--target", tgt, "--out", str(root / name)],
                           left * share)
        run_dir = gpu_outputs.find_run_dir(root / name) if (root / name).is_dir() else None
        missing = _NOT_LANDED.search(proc.output)
        if proc.rc == 0 and run_dir is not None:
            dirs[name] = run_dir
            notes.append(f"{name} ok")
        elif missing:
            notes.append(f"{name}: {missing.group(1)} not available in this commit")
        else:
            failures.append(f"{name} run {proc.describe()}")
    c.results["ratios"] = {
        key: gpu_outputs.a2_a0_ratios(dirs[name] / "summary.json")
        for key, name in (("measured", target), ("simulated", "sim")) if name in dirs
    }
    if len(dirs) == 2 and importlib.util.find_spec("loopserve.report") is not None:
        proc = c.loopserve(["report", str(dirs[target]), str(dirs["sim"]), "--out",
                            str(root / "report")], deadline - time.monotonic())
        if proc.rc == 0:
            notes.append("report ok")
        else:
            failures.append(f"report {proc.describe()}")
    if root.is_dir() and any(root.iterdir()):
        dropped = gpu_outputs.pack(c.out / "runs.tar.gz",
                                   {p.name: p for p in sorted(root.iterdir()) if p.is_dir()})
        notes.append("packed runs.tar.gz"
                     + (f" without {', '.join(dropped)}" if dropped else ""))
    if failures:
        raise StageFailed("; ".join(failures + notes))
    if not dirs:
        raise NotAvailable("; ".join(notes))
    return "; ".join(notes)


def calibrate(c: Check, cap: float) -> str:
    """``loopserve calibrate`` once it exists; its output and any profile it wrote under
    results/profiles/ packed as calibrate.tar.gz (a dry run puts the tree back as it was)."""
    need_cuda(c)
    if importlib.util.find_spec("loopserve.cli") is None:
        raise NotAvailable("calibrate: not available in this commit")
    top = c.loopserve(["--help"], 30, echo=False).output
    if not re.search(r"\bcalibrate\b", top):
        raise NotAvailable("calibrate: not available in this commit")
    helptext = c.loopserve(["calibrate", "--help"], 30, echo=False).output
    dest = c.scratch / "calibrate"
    model = "tiny" if c.dry else "ouro-1.4b"
    args = ["calibrate", "--target", c.device, "--model", model]
    if "--out" in helptext:
        args += ["--out", str(dest)]
    if (flag := _BUDGET_FLAG.search(helptext)) is not None:
        # The measuring budget: the stage's cap less the model build and the fit (a 60 s
        # budget fits the 120 s cap with a 1.4B build).
        args += [flag.group(1), str(max(int(cap) - 60, 10))]
    profiles = REPO / "results" / "profiles"
    before = {p: p.read_bytes() for p in profiles.glob("*.json")} if profiles.is_dir() else {}
    proc = c.loopserve(args, cap - 5)
    after = {p: p.read_bytes() for p in profiles.glob("*.json")} if profiles.is_dir() else {}
    changed = [p for p, data in after.items() if before.get(p) != data]  # new or rewritten
    folders = {"calibrate": dest} if dest.is_dir() else {}
    if changed:
        keep = c.scratch / "profiles"
        keep.mkdir(exist_ok=True)
        for p in changed:
            shutil.copy2(p, keep / p.name)
            if c.dry and p in before:  # a dry run must not leave tiny-model profiles behind
                p.write_bytes(before[p])
            elif c.dry:
                p.unlink()
        folders["profiles"] = keep
    if folders:
        gpu_outputs.pack(c.out / "calibrate.tar.gz", folders)
    require(proc, "loopserve calibrate")
    return f"calibrated; {len(changed)} profile(s) written" + (
        "; packed calibrate.tar.gz" if folders else "")


def fidelity(c: Check, cap: float) -> str:
    """``loopserve fidelity`` of the runs' scenario against the profile the calibrate stage
    just measured: the simulator's error on a dedicated device (a shared CPU drifts too much
    to show it), packed as fidelity.tar.gz."""
    need_cuda(c)
    found = sorted(p for p in (c.scratch / "calibrate").glob("*.json") if p.name != "env.json")
    if not found:
        raise NotAvailable("fidelity: the calibrate stage wrote no profile")
    dest = c.scratch / "fidelity"
    args = ["fidelity", SCENARIO, "--profile", str(found[0]), "--target", c.device,
            "--out", str(dest), "--no-progress"]
    if c.dry:  # the tiny model's profile was measured on the CPU
        args += [a for s in (*DRY_RUN_SETS, "hardware=cpu") for a in ("--set", s)]
    proc = c.loopserve(args, cap - 5)
    if dest.is_dir():
        gpu_outputs.pack(c.out / "fidelity.tar.gz", {"fidelity": dest})
    require(proc, "loopserve fidelity")
    doc = json.loads((dest / "fidelity.json").read_text())
    c.results["fidelity"] = {"step_mape": doc["step_mape"], "arms": doc["arms"],
                             "targets": doc.get("targets")}
    worst = max((abs(v["rel_error"]) for row in doc["arms"].values() for v in row.values()
                 if v["rel_error"] is not None), default=float("nan"))
    return (f"per-step MAPE {100 * doc['step_mape']:.1f}%, worst metric error "
            f"{100 * worst:.1f}%; packed fidelity.tar.gz")


def need_cuda(c: Check) -> None:
    """Fail a device stage at once when CUDA was asked for but the env stage found none."""
    if not c.cuda_ok:
        raise StageFailed("CUDA is not available on this machine (use --device cpu for "
                          "the dry run)")

