"""report.html: self-contained, side by side over runs, verdicts computed from medians."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from loopserve.cli import main
from loopserve.outputs.rundata import RunData
from loopserve.report.compare import arm_ratios, field_verdicts, verdict_sentences
from tests.scenario_fixtures import tiny, write_scenario


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("report")
    path = write_scenario(folder, tiny(repeats=1))
    a, b = folder / "run_a", folder / "run_b"
    assert main(["run", str(path), "--out", str(a), "--no-progress"]) == 0
    assert main(["run", str(path), "--out", str(b), "--no-progress",
                 "--set", "cost.core_call_s=0.002"]) == 0
    return a, b


def external_refs(html: str) -> list[str]:
    refs = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]+)""", html, flags=re.I)
    return [r for r in refs if not r.startswith(("data:", "#"))]


def test_run_report_is_self_contained(two_runs: tuple[Path, Path]) -> None:
    html = (two_runs[0] / "report.html").read_text()
    assert external_refs(html) == []
    assert "<link" not in html and "<script" not in html
    assert html.count("data:image/png;base64,") == 3  # timeline, ITL CDF, TTFT
    for text in ("Per-arm medians", "Validity", "All 3 runs are valid", "Resolved scenario",
                 "mixed/atomic", "per_depth"):
        assert text in html, text


def test_report_side_by_side_of_two_runs(
    two_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_runs
    out = tmp_path / "cmp"
    assert main(["report", str(a), str(b), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {out / 'report.html'}"
    html = (out / "report.html").read_text()
    assert external_refs(html) == []
    # one medians row per (run, arm), labelled by run
    medians = html.split("<h2>Per-arm medians</h2>")[1].split("<h2>")[0]
    assert len(re.findall(r"<td class=\"l\">run_a</td><td class=\"l\">", medians)) == 3
    assert len(re.findall(r"<td class=\"l\">run_b</td><td class=\"l\">", medians)) == 3
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]
    # without --out the report goes to the first run folder, whose own report.html is
    # replaced only when asked (--force)
    own = (a / "report.html").read_bytes()
    capsys.readouterr()
    assert main(["report", str(a), str(b)]) == 2
    assert "add --force to replace it" in capsys.readouterr().err
    assert (a / "report.html").read_bytes() == own
    assert main(["report", str(a), str(b), "--force"]) == 0
    assert "run_b" in (a / "report.html").read_text()


def test_report_on_a_missing_folder_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopserve: error: run_dir: ") and len(err.strip().splitlines()) == 1


def test_invalid_runs_are_listed_with_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = dict(tiny()["workload"], decode_population=4)  # fills max_num_seqs 4
    path = write_scenario(tmp_path, tiny(workload=workload, repeats=1, arms=["A0"]))
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    assert "INVALID (0/1 valid)" in capsys.readouterr().out
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert "found no free slot" in summary["runs"][0]["invalid_reason"]
    html = (tmp_path / "r" / "report.html").read_text()
    assert "1 of 1 runs are invalid" in html and "found no free slot" in html


# ---- verdicts from synthetic medians ---------------------------------------------------------
def fake_run(medians: list[dict[str, Any]], points: list[dict[str, Any]],
             scenario: dict[str, Any]) -> RunData:
    empty = pd.DataFrame()
    return RunData(Path("x"), {"points": points, "runs": [], "medians": medians}, scenario, {},
                   empty, empty, empty, label="x")


def med(arm: str, point_id: int, itl_p99: float, ttft_p50: float, tok_s: float) -> dict[str, Any]:
    return {"arm": arm, "point_id": point_id, "valid": True,
            "itl_ms": {"p50": 1.0, "p99": itl_p99, "max": itl_p99},
            "ttft_ms": {"p50": ttft_p50, "p99": ttft_p50}, "tpot_ms": {"mean": 1.0},
            "output_tok_s": tok_s, "prompt_token_loops_s": tok_s}


def test_variant_verdicts_pick_the_better_option_per_metric() -> None:
    points = [{"point_id": 0, "values": {"variant": "off", "workload.request_rate": 1.0}},
              {"point_id": 1, "values": {"variant": "off", "workload.request_rate": 2.0}},
              {"point_id": 2, "values": {"variant": "on", "workload.request_rate": 1.0}},
              {"point_id": 3, "values": {"variant": "on", "workload.request_rate": 2.0}}]
    scenario = {"arms": ["mixed"], "variants": {"off": {}, "on": {}},
                "workload": {"request_rate": 1.0}}
    run = fake_run([med("mixed", 0, 10.0, 5.0, 100.0), med("mixed", 1, 20.0, 9.0, 150.0),
                    med("mixed", 2, 12.0, 4.0, 100.2), med("mixed", 3, 18.0, 9.5, 160.0)],
                   points, scenario)
    verdicts = {(v.field, v.context, v.metric): v for v in field_verdicts(run)}
    at1 = "workload.request_rate=1.0"
    assert verdicts["variant", at1, "ITL p99 (ms)"].best == "off"
    assert verdicts["variant", at1, "TTFT p50 (ms)"].best == "on"
    assert verdicts["variant", at1, "output tok/s"].tie  # 100 vs 100.2: within 0.5%
    at2 = "workload.request_rate=2.0"
    assert verdicts["variant", at2, "ITL p99 (ms)"].best == "on"
    assert verdicts["variant", at2, "output tok/s"].best == "on"
    assert verdicts["variant", at2, "ITL p99 (ms)"].change_pct == pytest.approx(-10.0)
    # a swept field is judged only through the reference point (variant off)
    rate = [v for v in field_verdicts(run) if v.field == "workload.request_rate"]
    assert {v.context for v in rate} == {""}
    assert next(v for v in rate if v.metric == "output tok/s").best == 2.0
    lines = verdict_sentences([v for v in verdicts.values() if v.context == at1])
    assert lines[0].startswith(f"mixed at {at1}: variant=off is better on ITL p99 (ms)")
    assert "no difference (within 0.5%) on" in lines[0] and "output tok/s" in lines[0]


def test_arm_ratios_name_the_better_arm() -> None:
    run = fake_run([med("atomic", 0, 20.0, 5.0, 100.0), med("mixed", 0, 5.0, 6.0, 110.0)],
                   [{"point_id": 0, "values": {}}], {"arms": ["atomic", "mixed"]})
    rows = {r["metric"]: r for r in arm_ratios(run, 0)}
    assert rows["ITL p99 (ms)"]["ratio"] == pytest.approx(0.25)
    assert rows["ITL p99 (ms)"]["better"] == "mixed"
    assert rows["TTFT p50 (ms)"]["better"] == "atomic"
    assert rows["output tok/s"]["better"] == "mixed"
    assert rows["ITL p50 (ms)"]["better"] == "tie"
    assert {r["pair"] for r in rows.values()} == {"mixed/atomic"}
