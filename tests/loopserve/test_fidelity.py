"""`loopserve fidelity` on a tiny CPU scenario: fidelity.json (exact keys), report.html, the
batch comparison, and profiles that do not fit the scenario (one line, exit 2, no files)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from loopserve.cli import main
from loopserve.fidelity.compare import METRICS
from tests.helpers import profile_doc, stage

SCENARIO: dict[str, Any] = {
    "name": "fid-tiny", "model": "tiny", "hardware": "cpu", "cost": {"kind": "roofline"},
    "seed": 0, "repeats": 1, "arms": ["atomic", "per_depth", "mixed"],
    "scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 32, "prefill_chunk_size": 16},
    "cache": {"block_size": 16, "num_blocks": None, "layout": "last_exited"},
    "exit": {"mode": "fixed"},
    "workload": {"kind": "interference", "decode_population": 3, "decode_prompt_tokens": 8,
                 "decode_output_tokens": 10,
                 "inject": [{"at_decode_tokens": 3, "prompt_tokens": 40, "output_tokens": 3}]},
    "runner": {"attention_backend": "torch", "warmup": False},
}


def profile(model: str = "tiny", hardware: str = "cpu") -> dict[str, Any]:
    """A hand-written profile (the fidelity command does not care how it was fitted)."""
    return profile_doc(model, hardware, {
        "decode": stage(4e-4, decode_rows=1e-5),
        "prompt": stage(4e-4, prompt_tokens=2e-6),
        "mixed": stage(5e-4, decode_rows=1e-5, prompt_tokens=2e-6),
        "prefill": stage(2e-4, core_calls=3e-4, prompt_tokens=2e-6),
        "prelude": stage(3e-5),
        "coda": stage(1e-4, rows=5e-6),
    }, step_gap=stage(3e-5, items=1e-6), held_out_mape=0.05, num_threads=1)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("fid")
    (d / "scn.yaml").write_text(yaml.safe_dump(SCENARIO))
    (d / "cpu-tiny.json").write_text(json.dumps(profile()))
    return d / "scn.yaml", d / "cpu-tiny.json"


@pytest.fixture(scope="module")
def result(files: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    scn, prof = files
    out = tmp_path_factory.mktemp("fidrun") / "out"
    assert main(["fidelity", str(scn), "--profile", str(prof), "--target", "cpu", "--out",
                 str(out), "--no-progress"]) == 0
    return out


def test_fidelity_json_has_the_design_shape(result: Path) -> None:
    assert {p.name for p in result.iterdir()} == {
        "fidelity.json", "report.html", "steps.csv", "scenario.yaml", "env.json"}
    doc = json.loads((result / "fidelity.json").read_text())
    assert {"step_mape", "step_max_error", "arms", "same_batches"} <= set(doc)
    assert set(doc["arms"]) == {"atomic", "per_depth", "mixed"}
    for metrics in doc["arms"].values():
        assert set(metrics) == set(METRICS) == {
            "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms", "ttft_p99_ms", "tpot_mean_ms",
            "output_tok_s"}
        for v in metrics.values():
            assert set(v) == {"sim", "measured", "rel_error"}
            assert v["sim"] > 0 and v["measured"] > 0
            assert v["rel_error"] == pytest.approx((v["sim"] - v["measured"]) / v["measured"])
    assert 0 <= doc["step_mape"] <= doc["step_max_error"]
    kinds = doc["step_errors"]["by_kind"]
    assert {"decode", "prefill", "prompt", "mixed", "prelude", "coda"} <= set(kinds)
    total = sum(k["count"] for k in kinds.values())
    assert total == doc["step_errors"]["all"]["count"]
    assert sum(s["count"] for s in doc["step_errors"]["by_stage"].values()) == total
    machine = doc["machine"]
    assert set(machine["probe_s_before"]) == set(machine["probe_s_after"]) == {
        "decode_small", "decode_large", "prompt"}
    assert all(v > 0 for v in machine["probe_s_before"].values())
    assert machine["slowdown_vs_calibration"] is None  # the hand-written profile has no probes
    assert doc["allocator"]["calibration"] is None
    assert doc["measured_repeat_spread"] is None  # one repeat: no run-to-run spread
    assert set(doc["targets"]) == {"limits", "arms", "all_met", "arms_vs_fastest_repeat",
                                   "all_met_vs_fastest_repeat", "machine_steady", "unsteady"}
    assert doc["vs_fastest_repeat"] is None and doc["targets"]["arms_vs_fastest_repeat"] is None
    assert set(doc["targets"]["arms"]) == {"atomic", "per_depth", "mixed"}
    drift = doc["drift"]
    assert drift["kind"] == "decode"
    assert [r["arm"] for r in drift["runs"]] == ["atomic", "per_depth", "mixed"]
    for r in drift["runs"]:
        assert r["num_steps"] >= 10 and len(r["ratio_by_tenth"]) == 10
        assert all(v > 0 for v in r["ratio_by_tenth"])
        assert r["range"] == pytest.approx(max(r["ratio_by_tenth"]) / min(r["ratio_by_tenth"]))
    tail = doc["tail"]
    assert [r["arm"] for r in tail["runs"]] == ["atomic", "per_depth", "mixed"]
    for r in tail["runs"]:
        assert 1 <= r["num_tail"] <= r["num_intervals"]
        parts = sum(v["measured_ms"] for v in r["by_kind"].values()) + r["gap_measured_ms"]
        assert parts == pytest.approx(r["measured_ms"], rel=1e-6)
        assert r["largest_excess_kind"] in r["by_kind"]


def test_closed_workload_gives_identical_batch_sequences(result: Path) -> None:
    doc = json.loads((result / "fidelity.json").read_text())
    assert doc["same_batches"] is True
    b = doc["batches"]
    assert b["timing_dependent_schedule"] is False
    assert [r["arm"] for r in b["runs"]] == ["atomic", "per_depth", "mixed"]
    assert all(r["same"] and r["first_divergence"] is None and r["num_sim"] == r["num_measured"]
               for r in b["runs"])


def test_drift_is_the_measured_over_predicted_decode_time_by_tenth(result: Path) -> None:
    import csv
    import statistics

    doc = json.loads((result / "fidelity.json").read_text())
    with (result / "steps.csv").open() as f:
        rows = [r for r in csv.DictReader(f)
                if r["world"] == "measured" and r["arm"] == "mixed" and r["kind"] == "decode"]
    ratios = [(float(r["end_s"]) - float(r["start_s"])) / float(r["predicted_s"])
              for r in sorted(rows, key=lambda r: int(r["step"]))]
    n, k = len(ratios), 10  # tenths as numpy's array_split cuts them: the first n % k get +1
    sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
    starts = [sum(sizes[:i]) for i in range(k)]
    expected = [statistics.median(ratios[a:a + m]) for a, m in zip(starts, sizes, strict=True)]
    (mixed,) = [r for r in doc["drift"]["runs"] if r["arm"] == "mixed"]
    assert mixed["ratio_by_tenth"] == pytest.approx(expected, rel=1e-9)


def test_step_predictions_match_the_profile(result: Path) -> None:
    """Each measured step's prediction is the profile's formula on that step."""
    import csv

    with (result / "steps.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["world"] == "measured"]
    coda = [r for r in rows if r["kind"] == "coda"]
    assert coda and all(float(r["predicted_s"]) == pytest.approx(
        1e-4 + 5e-6 * int(r["num_decode_items"])) for r in coda)
    measured = [float(r["end_s"]) - float(r["start_s"]) for r in rows]
    assert all(m > 0 for m in measured)


def test_report_has_both_timelines_per_arm(result: Path) -> None:
    html = (result / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 1 + 3  # scatter + one timeline per arm
    for arm in ("atomic", "per_depth", "mixed"):
        assert arm in html
    assert "Batch sequences" in html and "must be identical" in html
    assert "The slowest token intervals" in html
    for r in json.loads((result / "fidelity.json").read_text())["tail"]["runs"]:
        assert f"<td>{r['num_tail']} of {r['num_intervals']}</td>" in html


@pytest.mark.parametrize(
    "prof, match",
    [
        (profile(model="small"), "model 'small'"),
        (profile(hardware="h200"), "hardware 'h200'"),
    ],
)
def test_a_profile_for_another_model_or_hardware_is_rejected(
        files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        prof: dict[str, Any], match: str) -> None:
    scn, _ = files
    path = tmp_path / "other.json"
    path.write_text(json.dumps(prof))
    out = tmp_path / "out"
    assert main(["fidelity", str(scn), "--profile", str(path), "--target", "cpu",
                 "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("loopserve: error: --profile") and match in err and "\n" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    "text, match",
    [
        (json.dumps(profile())[:-50], "not valid JSON"),
        ("", "not valid JSON"),
        (json.dumps({**profile(), "stages": {"decode": {"features": ["rows"]}}}), "stages"),
        (json.dumps({**profile(), "format": "loopserve-profile/9"}), "format"),
    ],
)
def test_corrupt_or_truncated_profiles_fail_without_a_traceback(
        files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        text: str, match: str) -> None:
    scn, _ = files
    path = tmp_path / "bad.json"
    path.write_text(text)
    out = tmp_path / "out"
    assert main(["fidelity", str(scn), "--profile", str(path), "--target", "cpu",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("loopserve: error: --profile") and match in err
    assert "\n" not in err and "Traceback" not in err
    assert not out.exists()


def test_bad_target_and_missing_profile(files: tuple[Path, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    scn, prof = files
    assert main(["fidelity", str(scn), "--profile", str(prof), "--target", "sim"]) == 2
    assert "--target" in capsys.readouterr().err
    assert main(["fidelity", str(scn), "--profile", str(tmp_path / "none.json"),
                 "--target", "cpu"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_repeats_give_a_measured_spread(files: tuple[Path, Path], tmp_path: Path) -> None:
    scn, prof = files
    out = tmp_path / "rep"
    assert main(["fidelity", str(scn), "--profile", str(prof), "--target", "cpu", "--out",
                 str(out), "--no-progress", "--set", "repeats=2", "--set", "arms=[mixed]",
                 "--set", "workload.decode_output_tokens=6"]) == 0
    doc = json.loads((out / "fidelity.json").read_text())
    spread = doc["measured_repeat_spread"]["mixed"]
    assert set(spread) == set(METRICS)
    assert all(v is not None and v >= 0 for v in spread.values())
    assert [r["repeat"] for r in doc["batches"]["runs"]] == [0, 1]


def test_with_repeats_the_sim_is_also_compared_with_the_fastest_repeat(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    import csv

    scn, prof = files
    out = tmp_path / "out"
    assert main(["fidelity", str(scn), "--profile", str(prof), "--target", "cpu", "--out",
                 str(out), "--no-progress", "--set", "repeats=2"]) == 0
    doc = json.loads((out / "fidelity.json").read_text())
    with (out / "steps.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["world"] == "measured"]
    for arm, row in doc["vs_fastest_repeat"].items():
        makespan = {rep: max(float(r["end_s"]) for r in rows
                             if r["arm"] == arm and r["repeat"] == str(rep))
                    for rep in (0, 1)}
        assert row["repeat"] == min(makespan, key=makespan.__getitem__)
        for name in METRICS:
            v = row[name]
            assert v["sim"] == doc["arms"][arm][name]["sim"]
            assert v["rel_error"] == pytest.approx((v["sim"] - v["measured"]) / v["measured"])
    assert set(doc["targets"]["arms_vs_fastest_repeat"]) == {"atomic", "per_depth", "mixed"}
    assert doc["measured_repeat_spread"] is not None


def test_an_unavailable_attention_backend_is_a_one_line_error(
        files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scn, prof = files
    out = tmp_path / "out"
    assert main(["fidelity", str(scn), "--profile", str(prof), "--target", "cpu", "--out",
                 str(out), "--no-progress", "--set", "runner.attention_backend=nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("loopserve: error: attention_backend") and "\n" not in err
    assert not out.exists()


def test_the_real_world_runs_with_the_profiles_thread_count(result: Path) -> None:
    scn = yaml.safe_load((result / "scenario.yaml").read_text())
    assert "num_threads" not in SCENARIO["runner"]
    assert scn["runner"]["num_threads"] == profile()["provenance"]["num_threads"] == 1


def test_exit_depths_per_arm_fixed_exits_run_all_depths(result: Path) -> None:
    doc = json.loads((result / "fidelity.json").read_text())
    exits = doc["exits"]
    assert exits["exit_model"] == {"kind": "core"}  # fixed: the core decides, no signals
    assert set(exits["arms"]) == {"atomic", "per_depth", "mixed"}
    for arm in exits["arms"].values():
        for world in ("sim", "measured"):
            w = arm[world]
            assert w["depth_fractions"] == [0.0, 0.0, 0.0, 1.0] and w["mean_loops"] == 4.0
            assert w["num_tokens"] == 3 * 9 + 2 and w["core_calls_per_output_token"] > 0
            assert w["request_loops"] == {"num_requests": 4, "p10": 4.0, "p50": 4.0,
                                          "p90": 4.0, "sd": 0.0}
        assert arm["tv_distance"] == 0.0 and arm["met"] is True
        # Every request runs all depths: resampling them moves nothing.
        assert arm["request_noise"] == {"num_requests": 4, "tv_p50": 0.0, "tv_p95": 0.0}
    assert exits["tv_limit"] == 0.05
