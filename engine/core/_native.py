"""Choose what gets loaded: the mypyc build (``make native``) when it is fresh, else the
Python sources, which stay the reference.

The build covers ``engine.core`` and the simulator's per-step code. It is used only when its
manifest names this Python and every source it was built from (the compiled modules and all
of ``engine/core``, whose types they read) matches the file on disk, byte for byte, and
then for all of its modules or none (compiled modules reach into each other's C structs), so
an edited source can never hide behind an old binary. ``LOOPSERVE_NATIVE=0`` forces the
sources. Each package with compiled modules calls ``activate`` before importing them.
"""

from __future__ import annotations

import hashlib
import importlib.util
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
        tag, sources = manifest["cache_tag"], manifest["sources"]
        items = list(sources.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "not built (make native)"
    if tag != sys.implementation.cache_tag:
        return f"built for {tag}, running {sys.implementation.cache_tag}"
    if len(list(native_dir.glob(f"{GROUP_NAME}__mypyc.*"))) != 1:
        return "incomplete build (make native)"
    for rel, digest in items:
        source = root / rel
        if not source.exists() or source_digest(source) != digest:
            warnings.warn(
                f"the native build is stale ({rel} changed since it was compiled); using "
                "the Python sources. Run `make native` to rebuild.",
                stacklevel=2,
            )
            return f"stale ({rel} changed)"
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
    _load_group()
    native = NATIVE_DIR.joinpath(*package.split("."))
    if native.is_dir() and str(native) not in package_path:
        package_path.insert(0, str(native))


def _load_group() -> None:
    """Load the group's shared library, which every compiled module imports by name.

    Loaded by path, not by putting NATIVE_DIR on sys.path: its package folders hold no
    ``__init__``, so the path finder would take them for namespace packages and shadow
    the real ``sim`` wherever the sources are not on sys.path (console scripts)."""
    name = f"{GROUP_NAME}__mypyc"
    if name in sys.modules:
        return
    (path,) = NATIVE_DIR.glob(f"{name}.*")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
