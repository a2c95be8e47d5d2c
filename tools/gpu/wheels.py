"""Wheels for the GPU machine: download them here, install them there (no network there).

The GPU image (Python 3.12, torch, numpy, pandas, matplotlib, pyyaml, pytest, ...) lacks simpy
and pydantic. ``python -m tools.gpu.wheels`` (``make gpu-wheels``) downloads cp312 manylinux
wheels of the versions installed in this venv into the git-ignored ``.whl/`` and writes
``.whl/COMMIT`` (the working tree that travels to the GPU machine carries no ``.git``).
``install_wheels`` is what ``tools.gpu.check`` runs there. It also brings flash-attn-4 and
what it needs (``tools.gpu.wheel_split``: over 64 MiB, so split over calls into
``.whl-fa4/call<k>/``; ``--no-fa4`` skips them). Standard library only.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from loopserve.outputs.env_info import commit_label
from tools.gpu import wheel_split

REPO = Path(__file__).resolve().parents[2]
WHEEL_DIR = REPO / ".whl"
FA4_DIR = REPO / ".whl-fa4"
SITE_DIR = Path("/tmp/site")
# Missing from the GPU image; typing_extensions travels too because pydantic-core needs a
# recent one and a newer copy is backward compatible with torch's use of it.
PACKAGES = (
    "simpy", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
    "typing-extensions",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
PYTHON_VERSION = "3.12"
# A wheel's tags must fit CPython 3.12 on x86-64 Linux: pure Python or cp312 manylinux.
_OK_TAGS = re.compile(
    r"-(py3|py2\.py3|cp312)-(none|cp312|abi3)-(any|(manylinux[\w.]*x86_64)(\.manylinux[\w.]*x86_64)*)"
    r"\.whl$"
)


def pinned() -> list[str]:
    """``name==version`` for each package, as installed in the running interpreter."""
    return [f"{name}=={metadata.version(name)}" for name in PACKAGES]


def download_command(dest: Path, specs: list[str]) -> list[str]:
    """The ``pip download`` command line for binary wheels of ``specs`` for the GPU image."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", PYTHON_VERSION, "--implementation", "cp"]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    return [*cmd, "-d", str(dest), *specs]


def bad_wheels(dest: Path) -> list[str]:
    """Files in ``dest`` that are not wheels usable by CPython 3.12 on manylinux x86-64."""
    return sorted(p.name for p in dest.glob("*.whl") if not _OK_TAGS.search(p.name))


def duplicate_projects(dest: Path) -> list[str]:
    """Projects with more than one wheel in ``dest`` (two versions break the install there)."""
    seen: dict[str, int] = {}
    for p in dest.glob("*.whl"):
        project = p.name.split("-")[0].lower().replace("_", "-")
        seen[project] = seen.get(project, 0) + 1
    return sorted(k for k, n in seen.items() if n > 1)


def write_commit(dest: Path) -> str:
    """Record the commit in ``dest/COMMIT`` for the GPU machine; returns it."""
    commit = commit_label(recorded=None)
    (dest / "COMMIT").write_text(commit + "\n")
    return commit


def read_commit(wheels_dir: Path = WHEEL_DIR) -> str:
    """The commit from git, else from a COMMIT file (the working tree sent to the GPU machine
    has no .git; ``make gpu-wheels`` writes .whl/COMMIT)."""
    return commit_label(wheels_dir / "COMMIT")


def install_command(wheels: list[Path], target: Path = SITE_DIR) -> list[str]:
    """The offline ``pip install`` of carried wheels into ``target`` (used on the GPU)."""
    return [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
            "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(target),
            *map(str, wheels)]


def main(argv: list[str] | None = None) -> int:
    """Download the wheels, drop stale versions, check their tags, write COMMIT."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, default=WHEEL_DIR)
    ap.add_argument("--no-fa4", action="store_true", help="leave out flash-attn-4's wheels")
    args = ap.parse_args(argv)
    args.dest.mkdir(parents=True, exist_ok=True)
    specs = pinned()
    wanted = {s.split("==")[0].replace("-", "_").lower() + "-" + s.split("==")[1] for s in specs}
    res = subprocess.run(download_command(args.dest, specs), check=False)
    if res.returncode != 0:
        print(f"gpu-wheels: pip download failed ({res.returncode})", file=sys.stderr)
        return res.returncode
    for p in args.dest.glob("*.whl"):  # versions no longer pinned here
        name, version = p.name.split("-")[:2]
        if f"{name.lower()}-{version}" not in wanted:
            print(f"gpu-wheels: removing stale {p.name}")
            p.unlink()
    problems = [f"not cp312/manylinux x86_64: {n}" for n in bad_wheels(args.dest)]
    problems += [f"several versions of {n}" for n in duplicate_projects(args.dest)]
    if problems:
        print("gpu-wheels: " + "; ".join(problems), file=sys.stderr)
        return 1
    commit = write_commit(args.dest)
    names = sorted(p.name for p in args.dest.glob("*.whl"))
    size = sum(p.stat().st_size for p in args.dest.glob("*.whl"))
    print(f"gpu-wheels: {len(names)} wheels ({size / 2**20:.1f} MiB) in {args.dest}, "
          f"commit {commit}")
    for n in names:
        print(f"  {n}")
    return 0 if args.no_fa4 else fa4_calls(size)


def fa4_calls(base: int, dest: Path = FA4_DIR) -> int:
    """Download FA4's wheels into ``dest/download``, split them over calls, print the plan."""
    download = dest / "download"
    download.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(download_command(download, list(wheel_split.FA4_PINS)), check=False)
    if res.returncode != 0:
        print(f"gpu-wheels: pip download of flash-attn-4 failed ({res.returncode})",
              file=sys.stderr)
        return res.returncode
    wanted = {pin.split("==")[0].replace("-", "_").lower() for pin in wheel_split.FA4_PINS}
    wheels = {p.name: p.stat().st_size for p in download.glob("*.whl")
              if p.name.split("-")[0].lower() in wanted}
    try:
        calls = wheel_split.plan_calls(wheels, wheel_split.tree_bytes(REPO), base)
    except ValueError as err:
        print(f"gpu-wheels: {err}", file=sys.stderr)
        return 1
    folders = wheel_split.write_calls(download, dest, calls)
    print(f"gpu-wheels: flash-attn-4 ({sum(wheels.values()) / 2**20:.1f} MiB) over "
          f"{len(calls)} calls on one warm machine:")
    for k, folder in enumerate(folders, start=1):
        rel = folder.relative_to(REPO) if folder.is_relative_to(REPO) else folder
        mib = sum(p.size for p in calls[k - 1]) / 2**20
        if k < len(folders):
            print(f"  call {k}: carry [\"{rel}\"] ({mib:.1f} MiB), command: mkdir -p "
                  f"{wheel_split.STASH_DIR} && cp {rel}/* {wheel_split.STASH_DIR}/")
        else:
            print(f"  call {k}: carry [\".whl\", \"{rel}\"] ({mib:.1f} MiB + .whl), "
                  "command: make gpu-check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
