"""The stages that run the project on the device: ``runs`` (the scenario on the device and in
simulation, and their report), ``calibrate`` and ``fidelity``. A piece that has not landed
in this commit reports n/a (NotAvailable), not a failure."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import time
from pathlib import Path

from tools.gpu import outputs
from tools.gpu.context import REPO, Check, need_cuda
from tools.gpu.proc import NotAvailable, Proc, StageFailed, require

SCENARIO = "scenarios/gpu-check.yaml"
# The dry run shrinks the scenario to the tiny model and a few dozen tokens.
DRY_RUN_SETS = (
    "model=tiny", "workload.decode_population=4", "workload.decode_output_tokens=24",
    "workload.inject=[{at_decode_tokens: 6, prompt_tokens: 96, output_tokens: 4}]",
    "scheduler.max_num_seqs=8", "scheduler.max_num_batched_tokens=64",
    "scheduler.prefill_chunk_size=32",
)
# A module of this project that is missing means the piece has not landed yet (not a failure).
_NOT_LANDED = re.compile(r"No module named '((?:engine|sim|loopserve|kernels)(?:\.\w+)*)'")
# A time-budget option of `loopserve calibrate`, if it offers one, gets the stage's cap.
_BUDGET_FLAG = re.compile(r"(--(?:budget|time-limit|max-time|max-seconds)[\w-]*)")


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
        run_dir = outputs.find_run_dir(root / name) if (root / name).is_dir() else None
        missing = _NOT_LANDED.search(proc.output)
        if proc.rc == 0 and run_dir is not None:
            dirs[name] = run_dir
            env = json.loads((run_dir / "env.json").read_text()) if (
                run_dir / "env.json").is_file() else {}
            backend = (env.get("runner") or {}).get("attention_backend")
            notes.append(f"{name} ok" + (f" ({backend} attention)" if backend else ""))
            if backend:
                c.results["runs_attention_backend"] = backend
        elif missing:
            notes.append(f"{name}: {missing.group(1)} not available in this commit")
        else:
            failures.append(f"{name} run {proc.describe()}")
    c.results["ratios"] = {
        key: outputs.a2_a0_ratios(dirs[name] / "summary.json")
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
        dropped = outputs.pack(c.out / "runs.tar.gz",
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
    if c.dry and "--quick" in helptext:  # plumbing only: the full grid takes minutes on a CPU
        args.append("--quick")
    # Kept for the exit profile after it (a model build, a short full-depth generation and
    # one generation per exit regime).
    exits_s = 20 if c.dry else 50
    if (flag := _BUDGET_FLAG.search(helptext)) is not None:
        # The measuring budget: the stage's cap less the model build and the fit (a 60 s
        # budget fits 120 s with a 1.4B build) and the exit profile's share.
        args += [flag.group(1), str(max(int(cap) - 60 - exits_s, 10))]
    profiles = REPO / "results" / "profiles"
    before = {p: p.read_bytes() for p in profiles.glob("*.json")} if profiles.is_dir() else {}
    deadline = time.monotonic() + cap - 5
    proc = c.loopserve(args, cap - 5 - exits_s)
    exits = _exit_profile(c, model, dest, top, deadline) if proc.rc == 0 else None
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
        outputs.pack(c.out / "calibrate.tar.gz", folders)
    require(proc, "loopserve calibrate")
    if exits is not None:
        require(exits, "loopserve exit-profile")
    return f"calibrated; {len(changed)} profile(s) written" + (
        "; exit profile measured" if exits is not None else "") + (
        "; packed calibrate.tar.gz" if folders else "")


def _exit_profile(c: Check, model: str, dest: Path, top: str, deadline: float) -> Proc | None:
    """``loopserve exit-profile`` beside the cost profile in ``dest`` (``<stem>.exits.json``,
    the sibling the fidelity stage's simulator reads), when the command exists."""
    if not re.search(r"\bexit-profile\b", top):
        return None
    found = sorted(p for p in dest.glob("*.json") if p.name != "env.json")
    if not found:
        return None
    out = found[0].with_name(found[0].stem + ".exits.json")
    n, tokens = ("2", "4") if c.dry else ("16", "48")
    regimes = ["--regimes", "ouro@0.5,ouro@0.7,ouro@0.9"] \
        if "--regimes" in c.loopserve(["exit-profile", "--help"], 30, echo=False).output else []
    return c.loopserve(["exit-profile", "--target", c.device, "--model", model, "--out",
                        str(out), "--num-prompts", n, "--max-tokens", tokens, *regimes],
                       max(deadline - time.monotonic(), 10))


def fidelity(c: Check, cap: float) -> str:
    """``loopserve fidelity`` of the runs' scenario against the profile the calibrate stage
    just measured: the simulator's error on a dedicated device (a shared CPU drifts too much
    to show it), packed as fidelity.tar.gz."""
    need_cuda(c)
    found = sorted(p for p in (c.scratch / "calibrate").glob("*.json")
                   if p.name != "env.json" and not p.name.endswith(".exits.json"))
    if not found:
        raise NotAvailable("fidelity: the calibrate stage wrote no profile")
    dest = c.scratch / "fidelity"
    args = ["fidelity", SCENARIO, "--profile", str(found[0]), "--target", c.device,
            "--out", str(dest), "--no-progress"]
    if c.dry:  # the tiny model's profile was measured on the CPU
        args += [a for s in (*DRY_RUN_SETS, "hardware=cpu") for a in ("--set", s)]
    proc = c.loopserve(args, cap - 5)
    if dest.is_dir():
        outputs.pack(c.out / "fidelity.tar.gz", {"fidelity": dest})
    require(proc, "loopserve fidelity")
    doc = json.loads((dest / "fidelity.json").read_text())
    c.results["fidelity"] = {"step_mape": doc["step_mape"], "arms": doc["arms"],
                             "targets": doc.get("targets")}
    worst = max((abs(v["rel_error"]) for row in doc["arms"].values() for v in row.values()
                 if v["rel_error"] is not None), default=float("nan"))
    return (f"per-step MAPE {100 * doc['step_mape']:.1f}%, worst metric error "
            f"{100 * worst:.1f}%; packed fidelity.tar.gz")
