"""The stages that set the machine up: ``wheels`` (install the carried wheels, check the
imports) and ``env`` (device facts -> env.json). Each takes the running ``Check`` and its cap
in seconds and returns a one-line detail, or raises StageFailed / NotAvailable."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tools.gpu import wheel_split
from tools.gpu import wheels as carried
from tools.gpu.context import Check
from tools.gpu.proc import StageFailed, require

REQUIRED_IMPORTS = ("simpy", "pydantic", "yaml", "numpy", "pandas", "matplotlib", "tqdm",
                    "torch", "pytest")
OPTIONAL_IMPORTS = ("triton", "hypothesis", "flash_attn.cute")


def install_wheels(c: Check, cap: float) -> str:
    """Install the carried wheels offline, then check the imports the project needs."""
    files = sorted(c.wheels_dir.glob("*.whl")) if c.wheels_dir.is_dir() else []
    fa4, fa4_problems = fa4_wheels(c)
    files += fa4
    notes = [f"flash-attn-4 wheels left out: {'; '.join(fa4_problems)}"] if fa4_problems else []
    if not files:
        notes.append(f"no wheels in {c.wheels_dir.name}/")
    else:
        cmd = carried.install_command(files, c.site_dir)
        # Wheels are built for the GPU image's Python 3.12; elsewhere (the dry run on 3.11)
        # install them for that target without putting them on the path.
        native = sys.version_info[:2] == (3, 12)
        if not native:
            cmd[-len(files):-len(files)] = [
                "--only-binary=:all:", "--python-version", carried.PYTHON_VERSION,
                "--implementation", "cp",
                *[a for p in carried.PLATFORMS for a in ("--platform", p)]]
        require(c.sh(cmd, cap / 2), "pip install of the carried wheels")
        installed = sorted(p.name for p in c.site_dir.glob("*.dist-info"))
        if native and str(c.site_dir) not in c.extra_path:
            c.extra_path.insert(0, str(c.site_dir))
        notes.append(f"{len(files)} wheels -> {c.site_dir}"
                     + ("" if native else " (cp312 target, not on this Python's path)"))
        c.results["wheels"] = {"files": [p.name for p in files], "installed": installed,
                               "on_path": native, "fa4_problems": fa4_problems}
    imports = check_imports(c, cap / 2)
    missing = [m for m in REQUIRED_IMPORTS if imports.get(m) is None]
    c.say("imports: " + ", ".join(f"{m} {v or 'MISSING'}" for m, v in imports.items()))
    opt = ", ".join(f"{m} {imports.get(m) or 'missing'}" for m in OPTIONAL_IMPORTS)
    if missing:
        raise StageFailed("; ".join(notes) + f"; MISSING {', '.join(missing)} "
                          "(carry them as wheels: make gpu-wheels, carry .whl; docs/gpu.md)")
    return "; ".join(notes) + f"; imports ok ({opt})"


def fa4_wheels(c: Check) -> tuple[list[Path], list[str]]:
    """flash-attn-4's wheels: the carried call folder of ``.whl-fa4`` (the one holding the
    manifest) and what earlier calls stashed, split wheels joined; plus what is missing."""
    finals = sorted((c.wheels_dir.parent / ".whl-fa4").glob(f"call*/{wheel_split.MANIFEST}"))
    if not finals or c.dry:  # the dry run has no use for them (FA4 runs on CUDA only)
        return [], []
    return wheel_split.gather(finals[-1].parent, wheel_split.STASH_DIR, c.scratch / "joined")


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
