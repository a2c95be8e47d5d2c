"""The profile-guided native build: its training run loads the build it is pointed at, a
failed or profile-less training falls back to a build without a profile, and the final
compile reads the training's profile."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine import _native
from tools import build_native

EXPECT_NATIVE = os.environ.get("LOOPSERVE_EXPECT_NATIVE") == "1"  # set by `make test`


def _needs_build() -> None:
    if not (_native.active() or EXPECT_NATIVE):
        pytest.skip(f"no native build ({_native.reason()})")


def _run(args: list[str], native_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOOPSERVE_NATIVE": "1", "LOOPSERVE_NATIVE_DIR": str(native_dir)}
    return subprocess.run([sys.executable, *args], env=env, cwd=_native.REPO_ROOT,
                          capture_output=True, text=True)


def test_a_build_loads_from_the_folder_named_in_the_environment(tmp_path: Path) -> None:
    _needs_build()
    copy = tmp_path / "native"
    shutil.copytree(_native.NATIVE_DIR, copy)
    code = ("import engine.core.scheduler as m; from engine import _native; "
            "print(_native.active(), m.__file__)")
    out = _run(["-c", code], copy)
    assert out.returncode == 0, out.stderr
    active, path = out.stdout.split()
    assert active == "True" and Path(path).is_relative_to(copy)


def test_training_refuses_a_folder_without_a_build(tmp_path: Path) -> None:
    out = _run(["-m", "tools.native_training"], tmp_path)
    assert out.returncode == 1
    assert "the build is not loaded (not built (make native))" in out.stderr
    with pytest.raises(RuntimeError, match="training run failed"):
        build_native._train(tmp_path, tmp_path / "profile")


def test_a_training_that_leaves_no_profile_is_refused(tmp_path: Path) -> None:
    # The checkout's own build is not instrumented: it trains, but writes no counters.
    _needs_build()
    with pytest.raises(RuntimeError, match="wrote no profile"):
        build_native._train(_native.NATIVE_DIR, tmp_path / "profile")


class _FakeCompiler:
    """Stands in for mypyc and the C compiler: records each pass's flags."""

    def __init__(self) -> None:
        self.passes: list[list[str]] = []

    def mypycify(self, paths: list[str], **kwargs: Any) -> list[SimpleNamespace]:
        return [SimpleNamespace(extra_compile_args=["-Wno-x"], extra_link_args=[])]

    def compile(self, ext_modules: list[Any], work: Path, flags: list[str], *,
                quiet: bool) -> Path:
        self.passes.append(list(flags))
        (work / "lib").mkdir(exist_ok=True)
        return work / "lib"


@pytest.mark.parametrize("training", ["fails", "works"])
def test_the_final_compile_reads_the_training_profile_or_falls_back(
    training: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import mypyc.build

    fake = _FakeCompiler()
    monkeypatch.setattr(mypyc.build, "mypycify", fake.mypycify)
    monkeypatch.setattr(build_native, "_compile", fake.compile)

    def train(lib: Path, profile_dir: Path) -> None:
        # The instrumented build is loadable, and says what it is.
        assert json.loads((lib / _native.MANIFEST).read_text())["build"] == "instrumented"
        if training == "fails":
            raise RuntimeError("training run failed: boom")

    monkeypatch.setattr(build_native, "_train", train)
    out_dir = tmp_path / "build" / "native"
    manifest = build_native.build(out_dir)
    assert manifest == out_dir / _native.MANIFEST and manifest.is_file()
    kind = json.loads(manifest.read_text())["build"]
    assert kind == ("plain" if training == "fails" else "profile-guided")
    generate, final = fake.passes
    assert generate[:2] == list(build_native.PORTABLE_FLAGS)
    assert generate[2].startswith("-fprofile-generate=")
    profile_dir = generate[2].split("=", 1)[1]
    if training == "fails":
        assert final == list(build_native.PORTABLE_FLAGS)
        assert "building without a profile (training run failed: boom)" in capsys.readouterr().out
    else:
        assert final[2] == f"-fprofile-use={profile_dir}"
        assert "-fprofile-partial-training" in final
    assert [p.name for p in out_dir.parent.iterdir()] == ["native"]  # the work dir is gone
