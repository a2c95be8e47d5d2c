"""Choose what gets loaded: the mypyc build (``make native``) when it is fresh, else the
Python sources, which stay the reference.

The build covers ``engine.core`` and the simulator's per-step code. It is used only when its
manifest names this Python and every compiled module's source matches the file on disk, and
then for all of its modules or none (compiled modules reach into each other's C structs), so
an edited source can never hide behind an old binary. ``LOOPSERVE_NATIVE=0`` forces the
sources. Each package with compiled modules calls ``activate`` before importing them.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
NATIVE_DIR = REPO_ROOT / "build" / "native"
MANIFEST = "manifest.json"
GROUP_NAME = "loopserve_native"

_why_not: list[str] = []  # memoised decision: empty until checked, then [reason or ""]


def source_path(module: str, root: Path = REPO_ROOT) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check(native_dir: Path = NATIVE_DIR, root: Path = REPO_ROOT) -> str:
    """Why the build in ``native_dir`` cannot be used for the sources under ``root``, or ""
    when it can. Warns when the build is stale."""
    if os.environ.get("LOOPSERVE_NATIVE", "1") == "0":
        return "LOOPSERVE_NATIVE=0"
    try:
        manifest = json.loads((native_dir / MANIFEST).read_text())
        tag, modules = manifest["cache_tag"], manifest["modules"]
        items = list(modules.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "not built (make native)"
    if tag != sys.implementation.cache_tag:
        return f"built for {tag}, running {sys.implementation.cache_tag}"
    for name, digest in items:
        source = source_path(name, root)
        if not source.exists() or source_digest(source) != digest:
            warnings.warn(
                f"the native build is stale ({name} changed since it was compiled); using "
                "the Python sources. Run `make native` to rebuild.",
                stacklevel=2,
            )
            return f"stale ({name} changed)"
    return ""


def reason() -> str:
    """Why the build is not in use, or "" when it is."""
    if not _why_not:
        _why_not.append(check())
    return _why_not[0]


def active() -> bool:
    return reason() == ""


def activate(package: str, package_path: list[str]) -> None:
    """Put ``package``'s compiled modules ahead of its sources when the build is usable."""
    if not active():
        return
    native = NATIVE_DIR.joinpath(*package.split("."))
    if native.is_dir() and str(native) not in package_path:
        package_path.insert(0, str(native))
    if str(NATIVE_DIR) not in sys.path:
        sys.path.append(str(NATIVE_DIR))  # the shared library of the compiled group
