"""Ray-parallel sweeps: a tiny sweep on 2 local Ray workers writes the same bytes as the
sequential run, its Ray's start-up having warmed 2 distinct worker processes (the ones later
tasks run on); the flags' bad uses and a missing Ray are one-line errors with nothing
written; the Ray session is shut down and the driver's signal handlers kept whatever
happens; run records survive pickling (how they leave a worker)."""

from __future__ import annotations

import pickle
import signal
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

from loopserve.cli import main
from loopserve.plan import plan_runs
from loopserve.runs import interrupts, ray_runs, record_pickling
from loopserve.runs.loop import execute
from loopserve.runs.ray_runs import RayOptions, ray_session
from loopserve.schema import load_scenario
from tests.scenario_fixtures import tiny, write_scenario

DATA_FILES = ("scenario.yaml", "summary.json", "vllm_results.json", "steps.parquet",
              "requests.parquet", "itl_quantiles.parquet", "trace.json.gz", "timeline.png",
              "itl_cdf.png")


def _sweep(folder: Path) -> Path:
    return write_scenario(folder, tiny(arms=["A0", "A2"], repeats=2,
                                       sweep={"workload.decode_population": [1, 2]}))


def test_two_ray_workers_write_the_sequential_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray")
    path = _sweep(tmp_path)
    seq, par = tmp_path / "seq", tmp_path / "par"
    warmed: list[list[int]] = []
    real_warm = ray_runs.warm_workers

    def spy(ray: Any, n: int) -> list[int]:
        warmed.append(real_warm(ray, n))
        warmed.append(real_warm(ray, n, timeout_s=5.0))  # once more: the same workers
        t0 = time.monotonic()  # one more task than CPUs: the barrier gives up in time
        warmed.append(real_warm(ray, n + 1, timeout_s=0.5) + [time.monotonic() - t0 < 5])
        return warmed[0]

    monkeypatch.setattr(ray_runs, "warm_workers", spy)
    assert main(["run", str(path), "--out", str(seq), "--no-progress"]) == 0
    assert main(["run", str(path), "--out", str(par), "--no-progress", "--workers", "2"]) == 0
    first, again, short = warmed
    assert len(first) == 2 and first == again  # 2 distinct processes, warm and kept
    assert short == first + [True]  # gave up in time with the 2 it could reach
    files = {p.name for p in seq.iterdir()}
    assert files == {p.name for p in par.iterdir()} and set(DATA_FILES) <= files
    for name in sorted(files - {"env.json", "report.html"}):  # those name the run folder
        assert (par / name).read_bytes() == (seq / name).read_bytes(), name
    import ray
    assert not ray.is_initialized()  # shut down after the runs


def test_records_survive_pickling(tmp_path: Path) -> None:
    record_pickling.register()
    plan = plan_runs(load_scenario(_sweep(tmp_path), []), "sim")
    (run,) = execute(plan, progress=False)[-1:]
    back = pickle.loads(pickle.dumps(run))
    rec, got = run.records, back.records
    assert len(rec.steps) > 0 and len(rec.tokens) > 0 and len(rec.requests) > 0
    for name in ("steps", "tokens", "requests"):
        rows, rows_back = getattr(rec, name), getattr(got, name)
        values = record_pickling.row_values
        assert [values(r) for r in rows] == [values(r) for r in rows_back]
    assert (got.wall_s, got.invalid_reasons, got.batches) == (
        rec.wall_s, rec.invalid_reasons, rec.batches)
    assert back.metrics == run.metrics and back.spec == run.spec


@pytest.mark.parametrize(("extra", "message"), [
    (["--workers", "0"], "--workers: must be an integer >= 1, got 0"),
    (["--workers", "two"], "--workers: 'two' is not an integer"),
    (["--workers", "2", "--ray-address", "auto"], "--workers: starts a local Ray"),
    (["--workers", "2", "--target", "cpu"], "--workers: target cpu runs one run at a time"),
    (["--ray-address", "auto", "--target", "cuda"], "--ray-address: target cuda runs one"),
    (["--ray-address", "127.0.0.1:1"], "--ray-address: cannot reach 127.0.0.1:1 ("),
])
def test_bad_uses_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    out = tmp_path / "out"
    assert main(["run", str(_sweep(tmp_path)), "--out", str(out), "--no-progress"] + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"loopserve: error: {message}") and err.count("\n") == 1, err
    assert not out.exists()


def test_missing_ray_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    out = tmp_path / "out"
    assert main(["run", str(_sweep(tmp_path)), "--out", str(out), "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err == ("loopserve: error: --workers: needs Ray, which is not installed: pip install "
                   "'loopserve[ray]' (or drop the flag to run the sweep in this process)\n")
    assert not out.exists()


class FakeRay(types.ModuleType):
    """Just enough of ``ray`` for ``ray_session``: init installs a SIGTERM handler, as Ray's
    does."""

    def __init__(self) -> None:
        super().__init__("ray")
        self.calls: list[Any] = []
        self.up = False

    def is_initialized(self) -> bool:
        return self.up

    def init(self, **kwargs: Any) -> None:
        self.calls.append(("init", kwargs))
        self.up = True
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def shutdown(self) -> None:
        self.calls.append("shutdown")
        self.up = False


@pytest.mark.parametrize("ending", [RuntimeError("boom"), interrupts.Interrupted(2)])
def test_ray_session_shuts_down_and_keeps_signal_handlers(
    monkeypatch: pytest.MonkeyPatch, ending: BaseException
) -> None:
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(ray_runs, "warm_workers", lambda ray, n: fake.calls.append(("warm", n)))
    with interrupts.deferred():
        mine = signal.getsignal(signal.SIGTERM)
        with pytest.raises(type(ending)), ray_session(RayOptions(workers=3)):
            assert signal.getsignal(signal.SIGTERM) is mine
            raise ending
    assert fake.calls == [("init", {"include_dashboard": False, "log_to_driver": False,
                                    "configure_logging": False, "num_cpus": 3}),
                          ("warm", 3), "shutdown"]
    fake.calls.clear()
    monkeypatch.setattr(ray_runs, "check_reachable", lambda address: fake.calls.append(address))
    with ray_session(RayOptions(address="ray://head:10001")):
        pass
    assert fake.calls.pop(0) == "ray://head:10001"  # checked before ray.init
    assert fake.calls[0][1]["address"] == "ray://head:10001"
    assert "num_cpus" not in fake.calls[0][1] and fake.calls[1] == "shutdown"  # not warmed
