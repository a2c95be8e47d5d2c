"""The mypyc build (``make native``): used only when fresh, and it gives the same rows to the
bit as the Python sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine import _native

EXPECT_NATIVE = os.environ.get("LOOPSERVE_EXPECT_NATIVE") == "1"  # set by `make test`


def _tree(tmp_path: Path, *, tag: str | None = None, digest: str | None = None) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    src = root / "pkg" / "mod.py"
    src.write_text("X = 1\n")
    native = root / "build" / "native"
    native.mkdir(parents=True)
    manifest = {
        "cache_tag": tag or sys.implementation.cache_tag,
        "modules": ["pkg.mod"],
        "sources": {"pkg/mod.py": digest or _native.source_digest(src)},
    }
    (native / _native.MANIFEST).write_text(json.dumps(manifest))
    (native / f"{_native.GROUP_NAME}__mypyc.so").write_bytes(b"")
    (native / "pkg").mkdir()
    (native / "pkg" / "mod.so").write_bytes(b"")
    return root


def test_a_fresh_build_is_usable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOPSERVE_NATIVE", raising=False)
    root = _tree(tmp_path)
    assert _native.check(root / "build" / "native", root) == ""


def test_an_edited_source_makes_the_build_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOOPSERVE_NATIVE", raising=False)
    root = _tree(tmp_path)
    (root / "pkg" / "mod.py").write_text("X = 2\n")
    with pytest.warns(UserWarning, match=r"stale \(pkg/mod.py changed.*make native"):
        assert _native.check(root / "build" / "native", root) == "stale (pkg/mod.py changed)"


def test_other_python_missing_or_corrupt_build_or_opt_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOOPSERVE_NATIVE", raising=False)
    root = _tree(tmp_path, tag="cpython-399")
    native = root / "build" / "native"
    assert _native.check(native, root).startswith("built for cpython-399")
    (native / f"{_native.GROUP_NAME}__mypyc.so").unlink()
    root = _tree(tmp_path / "c")
    native = root / "build" / "native"
    (native / f"{_native.GROUP_NAME}__mypyc.so").unlink()
    assert _native.check(native, root) == "incomplete build (make native)"
    (native / f"{_native.GROUP_NAME}__mypyc.so").write_bytes(b"")
    (native / "pkg" / "mod.so").unlink()  # a module of the manifest without its extension
    assert _native.check(native, root) == "incomplete build (make native)"
    (native / _native.MANIFEST).write_text("{not json")
    assert _native.check(native, root) == "not built (make native)"
    (native / _native.MANIFEST).unlink()
    assert _native.check(native, root) == "not built (make native)"
    root = _tree(tmp_path / "b")
    monkeypatch.setenv("LOOPSERVE_NATIVE", "0")
    assert _native.check(root / "build" / "native", root) == "LOOPSERVE_NATIVE=0"


def test_the_build_is_in_use_under_make_test() -> None:
    if not EXPECT_NATIVE:
        pytest.skip("run by `make test`, which builds native first (LOOPSERVE_EXPECT_NATIVE=1)")
    import engine.core.scheduler
    import engine.core.seeded_executor
    import sim.cost.calibrated
    import sim.cost.roofline

    assert _native.active(), _native.reason()
    assert _native.build_kind() == "profile-guided"  # `make native` trains the build
    for mod in (engine.core.scheduler, sim.cost.roofline, engine.core.seeded_executor):
        assert mod.__file__ is not None
        assert Path(mod.__file__).suffix == ".so", mod.__file__
        assert Path(mod.__file__).is_relative_to(_native.NATIVE_DIR)
    assert sim.cost.calibrated.__file__ is not None  # not in the build: from its source
    assert Path(sim.cost.calibrated.__file__).suffix == ".py"


def test_console_scripts_find_every_module(tmp_path: Path) -> None:
    # A console script has neither the repo nor the cwd on sys.path: the packages come from
    # the editable install, and the build must not shadow them (it once made ``sim`` a
    # namespace package of the build folder, without sim/cost/calibrated.py).
    code = (
        "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
        "import engine.core.batch\n"
        "import sim.cost.calibrated, sim.driver, loopserve.fidelity.compare\n"
        "from engine import _native\n"
        "print(_native.active(), str(_native.NATIVE_DIR) in sys.path)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, check=True)
    assert out.stdout.split() == [str(_native.active()), "False"]


_EARLY = """
import importlib.util, sys, warnings
# engine.core.stable_seeds (a module of the build, importing none of the project) from its
# source before ``engine`` has installed it
spec = importlib.util.spec_from_file_location("engine.core.stable_seeds",
                                              "engine/core/stable_seeds.py")
seeds = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = seeds
spec.loader.exec_module(seeds)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from engine import _native
    import engine.core.scheduler
print(_native.active(), engine.core.scheduler.__file__.endswith(".py"))
print(_native.reason())
print(*[str(w.message) for w in caught], sep="\\n")
"""


def test_a_module_imported_before_the_build_keeps_it_off() -> None:
    # Requirement 2 of engine/_native.py: the build's modules load from it or none does.
    if not (_native.active() or EXPECT_NATIVE):
        pytest.skip(f"no native build to install ({_native.reason()})")
    out = subprocess.run([sys.executable, "-c", _EARLY], capture_output=True, text=True,
                         cwd=_native.REPO_ROOT, check=True)
    in_use, reason, warning = out.stdout.splitlines()
    assert in_use == "False True"  # the build is off, and the core runs from its sources
    assert reason == ("imported from source before the build was installed: "
                      "engine.core.stable_seeds")
    assert warning.startswith("the native build is not used: imported from source before")


_RUN = """
import hashlib, sys
from engine import _native
from engine.core import CacheConfig, EngineConfig, ExitConfig, SchedulerConfig
from loopserve.workloads import build_source
from sim import make_cost_model, make_signal_fn, simulate
from engine.core.shapes import MODEL_SHAPES

shape = MODEL_SHAPES["ouro-1.4b"]
exit_cfg = ExitConfig(mode="ouro", exit_threshold=0.6)
workload = {"kind": "poisson", "request_rate": 40.0, "num_requests": 60,
            "prompt_tokens": {"dist": "lognormal", "median": 200, "sigma": 1.0, "max": 900},
            "output_tokens": {"dist": "lognormal", "median": 24, "sigma": 0.8, "max": 80}}
h = hashlib.sha256()
for arm, extra in [("atomic", {}), ("per_depth", {}), ("mixed", {}),
                   ("mixed", {"prompt_shortcut": True})]:
    sched = SchedulerConfig(arm=arm, max_num_seqs=8, max_num_batched_tokens=256,
                            prefill_chunk_size=128, **extra)
    cfg = EngineConfig(shape, sched, CacheConfig(num_blocks=4096), exit_cfg)
    source = build_source(workload, seed=3, vocab_size=shape.vocab_size)
    rec = simulate(cfg, source, make_cost_model("roofline", shape, hardware="h200"), seed=3,
                   signal_fn=make_signal_fn(exit_cfg, shape.num_depths, seed=3),
                   vocab_size=shape.vocab_size, record_batches=True)
    for rows in (rec.steps, rec.tokens, rec.requests, rec.batches):
        h.update(repr(rows).encode())
print(_native.active(), len(rec.steps), h.hexdigest())
"""


def test_compiled_and_python_sources_give_the_same_rows() -> None:
    if not (_native.active() or EXPECT_NATIVE):
        pytest.skip(f"no native build to compare ({_native.reason()})")

    def run(native: str) -> list[str]:
        env = {**os.environ, "LOOPSERVE_NATIVE": native}
        out = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True,
                             env=env, check=True)
        return out.stdout.split()

    compiled, pure = run("1"), run("0")
    assert compiled[0] == "True" and pure[0] == "False"
    assert int(compiled[1]) > 100
    assert compiled[1:] == pure[1:]
