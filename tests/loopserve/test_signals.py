"""SIGINT and SIGTERM during simulation, measurement and writing: exit 130 / 143, one line,
nothing written; a staging folder left by a SIGKILLed process is
removed by the next run into the same parent."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopserve.cli import main
from loopserve.outputs import records
from loopserve.runs import interrupts
from tests.scenario_fixtures import tiny, write_scenario

REPO = Path(__file__).resolve().parents[2]


def _start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "loopserve", "run", *args, "--no-progress",
         "--out", str(tmp_path / "out")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _interrupt(proc: subprocess.Popen[str], signum: int, delay_s: float) -> tuple[int, str]:
    time.sleep(delay_s)
    assert proc.poll() is None, "the command ended before the signal"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _assert_clean_exit(rc: int, err: str, signum: int, tmp_path: Path) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    name = signal.Signals(signum).name
    assert rc == 128 + signum, err
    assert lines == [f"loopserve: interrupted by {name}; nothing written"], err
    assert list(tmp_path.iterdir()) == []  # no run folder, no staging folder


@pytest.mark.parametrize("delay_s", [1.0, 3.0, 5.0])
def test_sigint_during_the_compiled_simulation_exits_130(tmp_path: Path, delay_s: float) -> None:
    # 12 repeats: about 20 s of simulation on a fast machine, so 5 s is still inside it
    proc = _start(tmp_path, "scenarios/interference.yaml", "--set", "repeats=12")
    rc, err = _interrupt(proc, signal.SIGINT, delay_s)
    assert rc != -signal.SIGABRT and "fatal" not in err
    _assert_clean_exit(rc, err, signal.SIGINT, tmp_path)


def test_sigterm_during_the_simulation_exits_143(tmp_path: Path) -> None:
    proc = _start(tmp_path, "scenarios/interference.yaml")
    rc, err = _interrupt(proc, signal.SIGTERM, 2.5)
    _assert_clean_exit(rc, err, signal.SIGTERM, tmp_path)


def test_one_sigterm_stops_a_long_single_run_within_seconds(tmp_path: Path) -> None:
    # one run of ~2M steps (minutes; few requests, so building them is quick): the loop
    # checks the flag between steps, so the signal ends it at once, not when the run ends
    # (systemd and timeout send one TERM, then KILL)
    folder = tmp_path.parent / f"{tmp_path.name}-scenario"
    folder.mkdir()
    scn = write_scenario(folder, tiny(
        arms=["A0"], repeats=1, workload={
            "kind": "poisson", "num_requests": 2000, "request_rate": 500.0,
            "prompt_tokens": 16, "output_tokens": 4096}))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "loopserve", "run", str(scn), "--out",
                             str(tmp_path / "out")], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    seen = b""
    while b"[sim]" not in seen:  # the progress bar: the one run has begun
        chunk = proc.stderr.read1(4096)  # type: ignore[attr-defined]
        assert chunk, f"the command ended before its run began: {seen!r}"
        seen += chunk
    time.sleep(1.0)
    assert proc.poll() is None, "the run ended before the signal"
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        _, rest = proc.communicate(timeout=60)
    finally:
        proc.kill()  # no-op when it has ended; a failed test leaves no run behind
    waited_s = time.monotonic() - sent
    err = (seen + rest).decode().replace("\r", "\n")
    err = "\n".join(line for line in err.splitlines() if "[sim]" not in line)
    _assert_clean_exit(proc.returncode, err, signal.SIGTERM, tmp_path)
    assert waited_s < 3.0, f"{waited_s:.1f} s from SIGTERM to exit"  # ~1 s, slack for CI


def test_sigterm_during_cpu_measurement_exits_143(tmp_path: Path) -> None:
    proc = _start(tmp_path, "scenarios/interference-cpu-short.yaml", "--target", "cpu")
    rc, err = _interrupt(proc, signal.SIGTERM, 8.0)  # torch loaded, measuring
    _assert_clean_exit(rc, err, signal.SIGTERM, tmp_path)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_writing_leaves_no_partial_folder(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], signum: int,
) -> None:
    real = records.write_records

    def write_then_signal(folder: Path, runs: object, *args: object, **kw: object) -> None:
        real(folder, runs, *args, **kw)  # type: ignore[arg-type]
        assert any(folder.iterdir())  # the staging folder holds files now
        os.kill(os.getpid(), signum)

    monkeypatch.setattr(records, "write_records", write_then_signal)
    scenario = write_scenario(tmp_path_factory.mktemp("in"), tiny())
    rc = main(["run", str(scenario), "--no-progress", "--out", str(tmp_path / "out")])
    _assert_clean_exit(rc, capsys.readouterr().err, signum, tmp_path)


def test_a_partial_folder_of_a_killed_process_is_removed(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    scenario = write_scenario(tmp_path_factory.mktemp("in"), tiny())
    leftover = tmp_path / ".old-run.partial-99999999-abc"  # no such pid
    leftover.mkdir()
    (leftover / "steps.csv").write_text("x\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "loopserve", "run", str(scenario), "--no-progress",
         "--out", str(tmp_path / "out")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not leftover.exists()
    assert f"removed {leftover}, left by killed process 99999999" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def _import_signalling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int) -> bool:
    """Import a module that sends itself ``signum`` half-way through its own import; whether
    the import ran to its end."""
    name = f"module_sending_{signal.Signals(signum).name.lower()}"
    (tmp_path / f"{name}.py").write_text(
        f"import os, signal\nos.kill(os.getpid(), {int(signum)})\nloaded = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return bool(importlib.import_module(name).loaded)


def test_a_signal_during_an_import_is_held_until_the_import_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Held, the module finishes loading and the signal is raised after the block. Unheld, the
    # exception cuts the import in two (inside a C extension's init it comes out as an
    # ImportError: the CI failure of stop 21).
    reached = []
    with pytest.raises(interrupts.Interrupted) as sig:
        with interrupts.immediate():
            with interrupts.importing():
                reached.append(_import_signalling(tmp_path, monkeypatch, signal.SIGTERM))
    assert reached == [True] and sig.value.exit_status == 143


def test_a_signal_held_by_an_import_inside_deferred_work_only_sets_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the held signal is delivered to deferred's handler: dropped, nothing would raise
    after = []
    with pytest.raises(interrupts.Interrupted) as sig:
        with interrupts.deferred():
            with interrupts.importing():
                _import_signalling(tmp_path, monkeypatch, signal.SIGINT)
            after.append("the deferred work went on")
    assert after == ["the deferred work went on"] and sig.value.exit_status == 130


@pytest.mark.parametrize("delay_s", [0.3, 0.5, 0.7, 0.9])
def test_sigint_while_the_command_loads_its_modules_exits_130(
    tmp_path: Path, delay_s: float
) -> None:
    # the imports take about a second here (pandas, matplotlib, numpy): whichever module is
    # loading when the signal comes, the outcome is the one line and 130
    proc = _start(tmp_path, "scenarios/interference.yaml")
    rc, err = _interrupt(proc, signal.SIGINT, delay_s)
    _assert_clean_exit(rc, err, signal.SIGINT, tmp_path)


def test_the_entry_point_loads_nothing_a_signal_could_cut() -> None:
    # the console script imports loopserve.cli before any handler is set: it must be light
    code = ("import sys, loopserve.cli; "
            "print(','.join(m for m in ('numpy', 'pydantic', 'sim', 'simpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("delay_s", [0.2, 0.6])
def test_sigint_while_the_console_script_loads_exits_130(tmp_path: Path, delay_s: float) -> None:
    script = Path(sys.executable).parent / "loopserve"  # what `make setup` installs
    proc = subprocess.Popen(
        [str(script), "run", "scenarios/interference.yaml", "--no-progress", "--out",
         str(tmp_path / "out")], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    rc, err = _interrupt(proc, signal.SIGINT, delay_s)
    assert "Traceback" not in err
    _assert_clean_exit(rc, err, signal.SIGINT, tmp_path)
