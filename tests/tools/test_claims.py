"""tools.claims: one docs row per run folder, from the folder's own JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import claims


def _metric(sim: float, measured: float) -> dict[str, float]:
    return {"sim": sim, "measured": measured, "rel_error": (sim - measured) / measured}


def _fidelity_dir(root: Path, name: str = "20261203T072658Z") -> Path:
    d = root / name
    d.mkdir()
    arms = {a: {"itl_p50_ms": _metric(11.0, 10.0), "ttft_p50_ms": _metric(38.0, 40.0),
                "itl_p99_ms": _metric(50.0, 50.0)} for a in claims.ARMS}
    doc = {
        "scenario": "poisson-adaptive-cpu",
        "profile": {"held_out_mape": 0.0385},
        "arms": arms,
        "at_run_speed": {"step_time_ratio": 0.983, "arms": arms},
        "targets": {"machine_steady": False, "arms": {
            "atomic": {"itl_p50_ms": True}, "per_depth": {"itl_p50_ms": False},
            "mixed": {"itl_p50_ms": True}}},
    }
    (d / "fidelity.json").write_text(json.dumps(doc))
    (d / "env.json").write_text(json.dumps({
        "started_at": "2026-12-03T07:26:57+0000",
        "command": [".venv/bin/loopserve", "fidelity", "scenarios/poisson-adaptive-cpu.yaml",
                    "--profile", "/tmp/lab/cpu-small.json", "--target", "cpu",
                    "--out", "/tmp/run", "--no-progress"]}))
    return d


def test_fidelity_row_reads_the_errors_verdict_date_and_command(tmp_path: Path) -> None:
    d = _fidelity_dir(tmp_path)
    row = claims.fidelity_row(d, profile="results/profiles/cpu-small.json")
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "2026-12-03"
    assert cells[1] == "poisson-adaptive-cpu"
    assert cells[2] == "3.85%"
    assert cells[3] == "+10.0 / +10.0 / +10.0 / +10.0%"      # ITL p50: 11 against 10
    assert cells[4] == "-5.0 / -5.0 / -5.0 / -5.0%"         # TTFT p50: 38 against 40
    assert cells[5] == "+0.0 / +0.0 / +0.0 / +0.0%"
    assert cells[7] == "met in atomic, mixed"
    assert cells[8] == "unsteady, x0.983 of calibration"
    assert cells[9] == ("`loopserve fidelity scenarios/poisson-adaptive-cpu.yaml --profile "
                        "results/profiles/cpu-small.json --target cpu`")


def test_bench_row_and_headers_once_per_kind(tmp_path: Path) -> None:
    b = tmp_path / "20261201T035017Z"
    b.mkdir()
    (b / "bench.json").write_text(json.dumps({"native": True, "arms": [
        {"arm": a, "median_core_calls_s": 80176.0 + i, "pure_median_core_calls_s": 21486.4,
         "ratio_to_simpy_loop": 0.0444 + i / 1000}
        for i, a in enumerate(claims.ARMS)]}))
    (b / "env.json").write_text(json.dumps({"command": "/x/.venv/bin/python -m tools.bench",
                                            "native": {"build": "profile-guided"}}))
    f1, f2 = _fidelity_dir(tmp_path), _fidelity_dir(tmp_path, "20261203T072427Z")
    out = claims.rows([f1, b, f2])
    assert out.count("| measured | scenario") == 1 and out.count("| measured | build") == 1
    bench_line = out.splitlines()[-1]
    assert bench_line == (
        "| 2026-12-01 | mypyc build, profile-guided "
        "| 80,176 (0.044x the SimPy loop; sources 21,486) "
        "| 80,177 (0.045x the SimPy loop; sources 21,486) "
        "| 80,178 (0.046x the SimPy loop; sources 21,486) "
        "| 80,179 (0.047x the SimPy loop; sources 21,486) | `python -m tools.bench` |")


def test_bench_row_of_fewer_arms_leaves_their_columns_empty(tmp_path: Path) -> None:
    b = tmp_path / "20261201T035017Z"
    b.mkdir()
    (b / "bench.json").write_text(json.dumps({"native": False, "arms": [
        {"arm": "mixed", "median_core_calls_s": 15000.0}]}))
    (b / "env.json").write_text(json.dumps({"command": "python -m tools.bench --arms mixed"}))
    assert claims.bench_row(b) == ("| 2026-12-01 | Python sources | – | – | 15,000 | – "
                                   "| `python -m tools.bench --arms mixed` |")


def test_a_folder_of_neither_kind_exits_2(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert claims.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "fidelity.json nor bench.json" in err
