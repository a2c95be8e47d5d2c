"""Choose what gets loaded: the mypyc build (``make native``) when it is fresh, else the
Python sources, which stay the reference.

The build covers ``engine.core`` and the simulator's per-step code (``tools/build_native.py``
lists the modules, and those it leaves out, with why). It is used only when its manifest
names this Python and every source it was built from (the compiled modules and all of
``engine/core``, whose types they read) matches the file on disk, byte for byte, and then for
all of its modules or none (compiled modules reach into each other's C structs), so an edited
source can never hide behind an old binary. ``LOOPSERVE_NATIVE=0`` forces the sources;
``LOOPSERVE_NATIVE_DIR`` loads a build from another folder (the build tool's training run of
its instrumented build, ``tools/native_training.py``).
``install`` puts a finder on ``sys.meta_path`` that loads every module the manifest names from
the build, and nothing else.

What the build needs of the code (each place points back to this list):

1. **Hot classes write out their ``__init__``.** A dataclass-generated ``__init__`` stays an
   interpreted function on a compiled class, so a class built per row or per step is
   ``@dataclass(init=False)`` with an ``__init__`` taking every field in order (with the
   class's default where it declares one): ``ScheduledItem``, ``FinalizeOp`` and
   ``Housekeeping`` (``engine/core/batch.py``; ``Batch`` computes its counts in its own),
   ``StepResult``, ``RecurrentResult``, ``CodaResult``, ``TokenEvent`` and ``StepRecord``
   (``engine/core/results.py``).
   ``tests/core/test_written_out_inits.py`` holds each of them to its fields.
2. **The finder is in place before any module of the build is imported.**
   ``engine/__init__.py`` calls ``install``, so importing anything of ``engine`` does;
   ``sim/__init__.py`` imports ``engine.core`` before any of its own modules for that reason
   (``sim`` may import nothing else of ``engine``). A module of the build already imported
   from its source when ``install`` runs would mix the two: ``install`` then leaves the build
   off and warns, naming the module (``reason``).
3. **Compiled records pickle through reducers.** Compiled, ``StepRecord`` and ``TokenEvent``
   do not unpickle (their ``__init__`` is called without the fields) and neither does the
   frozen ``RequestRecord`` (its fields cannot be set back): ``loopserve/runs/record_pickling.py``
   registers ``copyreg`` reducers for the record classes, and whatever pickles records (the
   Ray tasks, ``loopserve/runs/ray_runs.py``) calls its ``register`` first.
4. **No exception is raised into compiled code from a signal handler.** A KeyboardInterrupt
   raised inside the compiled driver can abort the process (a mypyc fatal error, SIGABRT),
   so while a run works a signal only sets a flag (``loopserve/runs/interrupts.py``), which
   the simulation loop reads between steps (``sim/stop.py``, ``sim/step_clock.py``) and the
   run loop between runs; ``tests/loopserve/test_signals.py`` interrupts a compiled run.
5. **Compiled classes are closed.** An instance takes no new attribute, a method patched on
   a class is not seen by compiled callers, and no class outside the build subclasses one
   (mypyc refuses most such subclasses; a new exit mode subclasses ``ExitDecider`` inside
   ``engine/core/exits.py``): tests and tools change behaviour through constructor
   arguments, not patches.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[1]
NATIVE_DIR = Path(os.environ.get("LOOPSERVE_NATIVE_DIR") or REPO_ROOT / "build" / "native")
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
    if any(extension_path(m, native_dir) is None for m in manifest.get("modules", ())):
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


def build_kind() -> str | None:
    """How the build in use was compiled (its manifest's ``build``: "profile-guided",
    "plain"), or None when the sources run."""
    if not active():
        return None
    kind = json.loads((NATIVE_DIR / MANIFEST).read_text()).get("build")
    return kind if isinstance(kind, str) else "plain"


def extension_path(module: str, native_dir: Path = NATIVE_DIR) -> Path | None:
    """The compiled extension of ``module`` in ``native_dir``, or None."""
    base = native_dir.joinpath(*module.split("."))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = base.with_name(base.name + suffix)
        if path.is_file():
            return path
    return None


class _NativeFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules of the build; every other import falls through."""

    def __init__(self, modules: dict[str, Path]) -> None:
        self.modules = modules

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        file = self.modules.get(fullname)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(fullname, file)


def install() -> None:
    """Load the build's modules ahead of their sources when it is usable (idempotent). Left
    off, with a warning, when one of them was imported from its source already."""
    if not active() or any(isinstance(f, _NativeFinder) for f in sys.meta_path):
        return
    manifest = json.loads((NATIVE_DIR / MANIFEST).read_text())
    modules = {m: extension_path(m) for m in manifest["modules"]}
    early = sorted(m for m in modules if m in sys.modules)
    if early:
        _why_not[0] = f"imported from source before the build was installed: {', '.join(early)}"
        warnings.warn(f"the native build is not used: {_why_not[0]} (engine/_native.py, 2)",
                      stacklevel=2)
        return
    _load_group()
    sys.meta_path.insert(0, _NativeFinder({m: p for m, p in modules.items() if p is not None}))


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
