"""`make gpu-check`: the CPU dry run end to end (so the script cannot rot between GPU leases),
plus its budget, failure isolation, output limits, pytest verdicts and ratio reading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from tools.gpu import outputs as gpu_outputs
from tools.gpu import stages as gpu_stages
from tools.gpu.check import run, run_stage
from tools.gpu.context import Check
from tools.gpu.stages import StageSpec

REPO = Path(__file__).resolve().parents[2]
STAGE_NAMES = [s.name for s in gpu_stages.STAGES]


def _probe_wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel, so the offline install path runs without network."""
    folder.mkdir()
    path = folder / "gpucheck_probe-0.1-py3-none-any.whl"
    info = "gpucheck_probe-0.1.dist-info"
    files = {
        "gpucheck_probe/__init__.py": "VALUE = 42\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: gpucheck-probe\nVersion: 0.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(f"{info}/RECORD", record)
    return path


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str],
                                                                Path]:
    tmp = tmp_path_factory.mktemp("gpu-check")
    _probe_wheel(tmp / "wheels")
    out = tmp / "out"
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    proc = subprocess.run(
        [sys.executable, "-m", "tools.gpu", "--device", "cpu", "--out", str(out),
         "--wheels", str(tmp / "wheels")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=360, check=False,
    )
    return proc, out


def test_dry_run_runs_every_stage_and_passes(dry_run: tuple[subprocess.CompletedProcess[str],
                                                            Path]) -> None:
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    results = json.loads((out / "gpu_check.json").read_text())
    stages = {s["name"]: s for s in results["stages"]}
    assert list(stages) == STAGE_NAMES
    for name in ("wheels", "env", "ceilings", "kernel", "pytest", "core", "runs", "profile",
                 "divergence"):
        assert stages[name]["status"] == "ok", stages[name]
    assert stages["calibrate"]["status"] == "ok", stages["calibrate"]
    assert (stages["fidelity"]["status"], stages["fidelity"]["detail"]) == (
        "skipped", "runs only with --only")
    for name in ("fa4", "graphs", "graph_tokens", "graph_runs"):  # the GPU path: CUDA only
        assert (stages[name]["status"], stages[name]["detail"]) == (
            "skipped", "needs CUDA: CUDA graphs and flash_attn_4 run only on a GPU")
    assert (stages["footprint"]["status"], stages["footprint"]["detail"]) == (
        "skipped", "needs CUDA: torch.cuda.max_memory_allocated reads the CUDA allocator")
    assert "footprint" not in results
    # The carried wheel went through the offline pip install.
    assert "gpucheck_probe-0.1.dist-info" in results["wheels"]["installed"]
    assert results["imports"]["torch"] and results["imports"]["simpy"]


def test_dry_run_measures_through_the_same_code_path(
    dry_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, out = dry_run
    results = json.loads((out / "gpu_check.json").read_text())
    ceil = results["ceilings"]
    assert ceil["dry_run"] and "dry run" in ceil["timer"]
    assert ceil["copy"]["bytes_per_s"] > 0 and ceil["matmul"]["tflop_per_s"] > 0
    core = results["core"]
    assert core["model"] == "tiny" and core["bandwidth_source"] == "measured"
    assert core["copy_bytes_per_s"] == pytest.approx(ceil["copy"]["bytes_per_s"])
    assert core["floor_s"] == pytest.approx(core["stack_bytes"] / core["copy_bytes_per_s"])
    # torch and triton (the interpreter) at 1/8/32 decode rows and 8 beside a prompt chunk.
    assert [(r["backend"], r["label"]) for r in core["model_core"]] == [
        (b, lab) for b in ("torch", "triton") for lab in ("1", "8", "32", "8+8")]
    assert [r["rows"] for r in core["runner"]] == [1, 8, 32]
    assert all(r["median_s"] > 0 for r in core["model_core"] + core["runner"])
    # Fixed-depth decode steps read nothing back (RFC §4), counted by the runner.
    assert all(r["readbacks_per_step"] == [0] for r in core["runner"])


def test_dry_run_checks_the_kernel_and_reports_divergence(
    dry_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, out = dry_run
    results = json.loads((out / "gpu_check.json").read_text())
    kernel = results["kernel"]
    assert [s["kind"] for s in kernel["shapes"]] == ["decode", "prompt", "mixed"]
    for s in kernel["shapes"]:
        assert s["ok"] and s["errors"]["triton_rel"] <= kernel["tolerance"]
        assert s["times_s"]["triton"] > 0 and s["floor_s"] > 0
    div = results["divergence"]
    assert [p["pair"] for p in div["pairs"]] == [
        "mixed vs per_depth", "mixed vs atomic", "per_depth vs atomic"]
    assert len(div["exit_depths_seen"]) > 1  # exits vary, so depths are compared too
    table = (out / "summary.txt").read_text()
    assert "kernel mixed" in table and "divergence mixed vs atomic" in table


def test_dry_run_outputs_fit_the_device_limits(
    dry_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, out = dry_run
    files = [p for p in out.rglob("*") if p.is_file()]
    assert 0 < len(files) <= 8
    assert all(p.stat().st_size <= 16 * 2**20 for p in files)
    assert all(len(p.relative_to(out).parts) <= 3 for p in files)
    assert gpu_outputs.limit_problems(out) == []
    env = json.loads((out / "env.json").read_text())
    for key in ("gpu", "gpu_memory_gib", "driver", "torch", "triton", "python", "commit",
                "device", "dry_run"):
        assert key in env, key
    assert env["device"] == "cpu" and env["dry_run"] is True and env["torch"]


def test_dry_run_packs_the_runs_and_reads_the_ratios(
    dry_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, out = dry_run
    results = json.loads((out / "gpu_check.json").read_text())
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = tar.getnames()
    assert "sim/summary.json" in names
    assert results["ratios"]["simulated"]["itl_p99"] > 0
    runs = next(s for s in results["stages"] if s["name"] == "runs")
    assert "cpu ok" in runs["detail"]
    assert "cpu/summary.json" in names and "report/report.html" in names
    assert results["ratios"]["measured"]["output_tok_s"] > 0


def test_dry_run_prints_the_table_last(
    dry_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    proc, out = dry_run
    lines = proc.stdout.rstrip().splitlines()
    table = (out / "summary.txt").read_text().rstrip().splitlines()
    assert lines[-len(table):] == table
    assert table[0].startswith("== gpu-check DRY RUN")
    assert any(ln.startswith("ceilings: copy") for ln in table)
    assert lines[-1].lstrip().startswith("output tok/s")
    assert any(ln.split()[:1] == ["32"] for ln in table)  # core call at 32 rows


# ---- budget, isolation, helpers --------------------------------------------------------------
def _check(tmp_path: Path, budget_s: float = 600.0, only: set[str] | None = None) -> Check:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    return Check(device="cpu", out=tmp_path / "out", budget_s=budget_s,
                 wheels_dir=tmp_path / "none", site_dir=tmp_path / "site", only=only,
                 scratch=scratch)


def test_a_stage_without_time_left_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(gpu_stages.RUNNERS, "env", lambda c, cap: f"ran with cap {cap:.0f}")
    check = _check(tmp_path, budget_s=68.0)
    run_stage(check, StageSpec("env", 45, 45, 5), [StageSpec("runs", 240, 120, 60)])
    assert [(s.name, s.status) for s in check.stages] == [("env", "skipped")]
    # With the later stage left out by --only, its reserve is free again.
    check = _check(tmp_path, budget_s=68.0, only={"env"})
    run_stage(check, StageSpec("env", 45, 45, 5), [StageSpec("runs", 240, 120, 60)])
    assert (check.stages[0].status, check.stages[0].detail) == ("ok", "ran with cap 45")


def test_a_crashing_stage_fails_alone_and_the_exit_status_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    check = _check(tmp_path, only={"env", "ceilings"})
    monkeypatch.setitem(gpu_stages.RUNNERS, "env", lambda c, cap: 1 / 0)
    monkeypatch.setitem(gpu_stages.RUNNERS, "ceilings", lambda c, cap: "measured")
    assert run(check) == 1
    status = {s.name: s.status for s in check.stages}
    assert status["env"] == "failed" and status["ceilings"] == "ok"
    assert status["core"] == "skipped"
    assert "ZeroDivisionError" in check.stages[1].detail
    assert capsys.readouterr().out.rstrip().endswith(
        gpu_outputs.final_table(check.results).splitlines()[-1])


def test_a_subprocess_over_its_cap_is_killed(tmp_path: Path) -> None:
    check = _check(tmp_path)
    t0 = time.monotonic()
    proc = check.sh([sys.executable, "-c", "import time; print('started', flush=True); "
                     "time.sleep(60)"], timeout=1.5)
    assert proc.timed_out and proc.rc != 0
    assert "started" in proc.output
    assert time.monotonic() - t0 < 15


def test_limit_problems_finds_each_kind(tmp_path: Path) -> None:
    ok = tmp_path / "ok"
    (ok / "a" / "b").mkdir(parents=True)
    (ok / "a" / "b" / "f.txt").write_text("x")
    assert gpu_outputs.limit_problems(ok) == []
    bad = tmp_path / "bad"
    (bad / "a" / "b" / "c").mkdir(parents=True)
    (bad / "a" / "b" / "c" / "deep.txt").write_text("x")
    for i in range(8):
        (bad / f"f{i}.txt").write_text("x")
    with (bad / "big.bin").open("wb") as f:
        f.truncate(16 * 2**20 + 1)
    (bad / "odd name.txt").write_text("x")
    problems = "\n".join(gpu_outputs.limit_problems(bad))
    assert "11 files" in problems
    assert "big.bin" in problems and "deep.txt" in problems and "odd name.txt" in problems


def test_pack_leaves_out_the_largest_members_to_fit(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    (run / "trace.json").write_bytes(os.urandom(200_000))
    dest = tmp_path / "runs.tar.gz"
    assert gpu_outputs.pack(dest, {"sim": run}, max_bytes=50_000) == ["sim/trace.json"]
    with tarfile.open(dest) as tar:
        assert tar.getnames() == ["sim/summary.json"]


@pytest.mark.parametrize(
    ("rc", "counts", "cuda", "status"),
    [
        (0, {"tests": 3, "failures": 0, "errors": 0, "skipped": 3}, False, "ok"),
        (5, {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}, False, "ok"),
        (0, {"tests": 3, "failures": 0, "errors": 0, "skipped": 3}, True, "failed"),
        (5, {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}, True, "failed"),
        (0, {"tests": 3, "failures": 0, "errors": 0, "skipped": 1}, True, "ok"),
        (1, {"tests": 3, "failures": 1, "errors": 0, "skipped": 0}, True, "failed"),
        (1, {"tests": 3, "failures": 0, "errors": 1, "skipped": 2}, False, "failed"),
        (2, None, False, "failed"),
    ],
)
def test_pytest_verdict(rc: int, counts: dict[str, int] | None, cuda: bool, status: str) -> None:
    assert gpu_outputs.pytest_verdict(rc, counts, cuda=cuda)[0] == status


def test_ratios_come_from_the_medians(tmp_path: Path) -> None:
    def row(arm: str, p99: float, tok_s: float) -> dict[str, object]:
        return {"arm": arm, "point_id": 0, "itl_ms": {"p99": p99}, "output_tok_s": tok_s}

    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"medians": [row("atomic", 10.0, 100.0),
                                            row("per_depth", 7.0, 110.0),
                                            row("mixed", 4.0, 125.0)]}))
    assert gpu_outputs.a2_a0_ratios(path) == {"itl_p99": 0.4, "output_tok_s": 1.25}
    path.write_text(json.dumps({"medians": [row("atomic", 10.0, 100.0)]}))
    assert gpu_outputs.a2_a0_ratios(path) == {"itl_p99": None, "output_tok_s": None}


def test_fidelity_runs_against_the_profile_calibrate_just_measured(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    proc = subprocess.run(
        [sys.executable, "-m", "tools.gpu", "--device", "cpu", "--out", str(out),
         "--wheels", str(tmp_path / "none"), "--only", "calibrate,fidelity"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    results = json.loads((out / "gpu_check.json").read_text())
    stages = {s["name"]: s["status"] for s in results["stages"]}
    assert stages["calibrate"] == stages["fidelity"] == "ok"
    assert set(results["fidelity"]["arms"]) == {"atomic", "per_depth", "mixed"}
    with tarfile.open(out / "calibrate.tar.gz") as tar:  # the exit profile beside the cost's
        assert any(n.endswith(".exits.json") for n in tar.getnames()), tar.getnames()
    assert results["fidelity"]["step_mape"] >= 0 and results["fidelity"]["targets"]
    with tarfile.open(out / "fidelity.tar.gz") as tar:
        names = tar.getnames()
    assert "fidelity/fidelity.json" in names and "fidelity/report.html" in names
    assert not gpu_outputs.limit_problems(out)


def test_divergence_pairs_name_the_first_token_and_depth_that_differ() -> None:
    from tools.gpu.divergence import compare

    a = [([1, 2, 3, 4], [4, 4, 2, 1]), ([5, 6], [4, 4])]
    b = [([1, 2, 9, 4], [4, 4, 2, 3]), ([5, 6], [4, 4])]
    res = compare("mixed", a, "atomic", b)
    assert res["requests_differing"] == 1
    assert res["first"] == {"request": 0, "output_index": 2, "what": "token 3 vs 9"}
    assert res["first_depth"] == {"request": 0, "output_index": 3}
    assert res["matched_fraction"] == 4 / 6
    assert compare("a", a, "b", a)["first"] is None
