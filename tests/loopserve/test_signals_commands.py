"""SIGINT and SIGTERM end every long command, not only run/sweep: calibrate,
exit-profile, fidelity, report and bench serve exit 128 + signal with one line
(``loopserve: interrupted by SIG...; nothing written``), no traceback and nothing written;
a temp file a SIGKILLed writer left is removed by the next write into its folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from loopserve.cli import main
from loopserve.report import page
from tests.scenario_fixtures import tiny, write_scenario

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


class _Child:
    """A ``loopserve`` subprocess whose stderr is collected as it comes."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "loopserve", *args], cwd=REPO,
                                     env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.err = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        while chunk := os.read(self.proc.stderr.fileno(), 4096):
            self.err += chunk

    def wait_until(self, ready: Callable[[], bool], timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert self.proc.poll() is None, f"ended before the signal: {self.err.decode()}"
            assert time.monotonic() < deadline, "never got ready"
            time.sleep(0.1)

    def torch_loaded(self) -> bool:  # torch loads inside the handler: the handlers are set
        try:
            return "libtorch" in Path(f"/proc/{self.proc.pid}/maps").read_text()
        except OSError:
            return False

    def interrupt(self, signum: int) -> tuple[int, str]:
        assert self.proc.poll() is None, f"ended before the signal: {self.err.decode()}"
        self.proc.send_signal(signum)
        rc = self.proc.wait(timeout=120)
        self._reader.join(timeout=30)
        return rc, self.err.decode(errors="replace")


def _assert_clean(rc: int, err: str, signum: int, folder: Path) -> None:
    name = signal.Signals(signum).name
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 128 + signum, err
    assert "Traceback" not in err and "fatal" not in err, err
    assert lines[-1] == f"loopserve: interrupted by {name}; nothing written", err
    assert sum(x.startswith("loopserve:") for x in lines) == 1, err
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(("signum", "out"), [(signal.SIGTERM, "prof"),
                                             (signal.SIGINT, "cpu-tiny.json")])
def test_calibrate(tmp_path: Path, signum: int, out: str) -> None:
    child = _Child("calibrate", "--target", "cpu", "--model", "tiny", "--quick",
                   "--out", str(tmp_path / out))
    child.wait_until(lambda: b"calibrate:" in child.err)  # measuring
    time.sleep(0.5)
    _assert_clean(*child.interrupt(signum), signum, tmp_path)


def test_exit_profile(tmp_path: Path) -> None:
    child = _Child("exit-profile", "--target", "cpu", "--model", "tiny", "--num-prompts", "64",
                   "--max-tokens", "64", "--out", str(tmp_path / "x.exits.json"))
    child.wait_until(child.torch_loaded)
    time.sleep(1.0)
    _assert_clean(*child.interrupt(signal.SIGINT), signal.SIGINT, tmp_path)


def test_fidelity_while_measuring(tmp_path: Path) -> None:
    child = _Child("fidelity", "scenarios/interference-cpu-short.yaml", "--target", "cpu",
                   "--profile", "results/profiles/cpu-small.json", "--out", str(tmp_path / "f"))
    child.wait_until(child.torch_loaded)
    time.sleep(3.0)
    _assert_clean(*child.interrupt(signal.SIGTERM), signal.SIGTERM, tmp_path)


def test_bench_serve(tmp_path: Path) -> None:
    stub = subprocess.Popen([sys.executable, "-m", "loopserve.bench.stub", "--port", "0"],
                            cwd=REPO, env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert stub.stdout is not None
        url = stub.stdout.readline().split("stub: ")[1].strip()
        child = _Child("bench", "serve", "--base-url", url, "--dataset-name", "random",
                       "--num-prompts", "400", "--random-input-len", "8",
                       "--random-output-len", "4", "--request-rate", "4",
                       "--result-file", str(tmp_path / "r.json"))
        child.wait_until(lambda: b"req/s]" in child.err)  # sending
        time.sleep(1.0)
        _assert_clean(*child.interrupt(signal.SIGTERM), signal.SIGTERM, tmp_path)
    finally:
        stub.terminate()
        stub.wait(timeout=30)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_report_into_a_new_folder(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], signum: int,
) -> None:
    src = tmp_path_factory.mktemp("src")
    assert main(["run", str(write_scenario(src, tiny(repeats=1))), "--no-progress",
                 "--out", str(src / "run")]) == 0
    capsys.readouterr()
    real = page.render_html

    def render_then_signal(*a: object, **k: object) -> str:
        os.kill(os.getpid(), signum)
        return real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr("loopserve.commands.report.render_html", render_then_signal)
    rc = main(["report", str(src / "run"), "--out", str(tmp_path / "new" / "rep")])
    _assert_clean(rc, capsys.readouterr().err, signum, tmp_path)


def test_a_temp_file_of_a_killed_writer_is_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(write_scenario(tmp_path, tiny(repeats=1))), "--no-progress",
                 "--out", str(tmp_path / "run")]) == 0
    leftover = tmp_path / "run" / ".report.html.partial-99999999-abc"  # no such pid
    leftover.write_text("<html")
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run")]) == 0
    assert not leftover.exists()
    assert f"removed {leftover}, left by killed process 99999999" in capsys.readouterr().err


def test_a_sigint_during_the_compiled_simulation_ends_it_within_a_step(tmp_path: Path) -> None:
    """The simulation loop checks the signal's flag between steps (sim.stop), so one SIGINT
    ends a long single run there and then: exit 130, one line, nothing written."""
    child = _Child("run", "scenarios/poisson.yaml", "--set", "sweep=null", "--set", "repeats=1",
                   "--set", "arms=[mixed]", "--set", "workload.num_requests=20000",
                   "--out", str(tmp_path / "out"))  # one run of several seconds
    child.wait_until(lambda: b"[sim]" in child.err)  # simulating
    time.sleep(1.0)
    started = time.monotonic()
    _assert_clean(*child.interrupt(signal.SIGINT), signal.SIGINT, tmp_path)
    assert time.monotonic() - started < 10.0  # a step, not the rest of the run
