"""`loopserve capacity` on a tiny poisson scenario: per-arm capacities that `loopserve run`
confirms at the found rate and refutes at the bracket's top, the folder's files, byte-identical
reruns, the goodput-fraction criterion, and one-line errors for bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from loopserve.cli import main
from tests.scenario_fixtures import tiny, write_scenario

POISSON = {"kind": "poisson", "num_requests": 20, "request_rate": 20.0,
           "prompt_tokens": {"dist": "uniform", "low": 4, "high": 20},
           "output_tokens": {"dist": "uniform", "low": 2, "high": 8}}
SLO = {"ttft_p99_ms": 100.0, "itl_p99_ms": 20.0}
FILES = {"capacity.json", "capacity.csv", "probes.csv", "capacity.png", "scenario.yaml",
         "env.json"}


def scenario(folder: Path, **changes: Any) -> Path:
    return write_scenario(folder, tiny(**{"workload": POISSON, "repeats": 1, "slo": SLO,
                                          **changes}))


@pytest.fixture(scope="module")
def cap_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cap")
    out = folder / "cap"
    assert main(["capacity", str(scenario(folder)), "--out", str(out), "--no-progress",
                 "--tolerance", "0.1", "--set", "sweep={workload.request_rate: [1, 2]}"]) == 0
    return out


def test_files_and_one_found_capacity_per_arm(cap_dir: Path) -> None:
    assert {p.name for p in cap_dir.iterdir()} == FILES
    doc = json.loads((cap_dir / "capacity.json").read_text())
    assert doc["criterion"]["slo"] == SLO  # the scenario's slo by default
    assert [a["arm"] for a in doc["arms"]] == ["atomic", "per_depth", "mixed"]
    for a in doc["arms"]:
        assert a["status"] == "found"
        assert a["high_req_s"] - a["low_req_s"] <= 0.1 * a["low_req_s"]
        assert a["capacity_req_s"] == a["low_req_s"] == max(
            p["rate"] for p in a["probes"] if p["meets"])
        assert a["at_capacity"]["itl_p99_ms"] <= 20 and a["at_capacity"]["ttft_p99_ms"] <= 100
    with (cap_dir / "capacity.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [float(r["capacity_req_s"]) for r in rows] == [a["capacity_req_s"]
                                                          for a in doc["arms"]]
    with (cap_dir / "probes.csv").open() as f:
        assert len(list(csv.DictReader(f))) == sum(a["num_probes"] for a in doc["arms"])
    scn = (cap_dir / "scenario.yaml").read_text()
    assert "sweep" not in scn  # the searched scenario, without the sweep it ignored


def _medians(folder: Path, arm: str, rate: float) -> dict[str, Any]:
    out = folder / f"run-{arm}-{rate}"
    assert main(["run", str(folder.parent / "scenario.yaml"), "--out", str(out),
                 "--no-progress", "--set", f"arms=[{arm}]", "--set", "sweep=null",
                 "--set", f"workload.request_rate={rate}"]) == 0
    (m,) = json.loads((out / "summary.json").read_text())["medians"]
    return dict(m)


def test_run_confirms_the_capacity_and_refutes_the_bracket_top(
    cap_dir: Path, tmp_path: Path,
) -> None:
    doc = json.loads((cap_dir / "capacity.json").read_text())
    arm = doc["arms"][2]  # mixed
    folder = tmp_path / "runs"
    folder.mkdir()
    (tmp_path / "scenario.yaml").write_text((cap_dir.parent / "scenario.yaml").read_text())
    ok = _medians(folder, arm["arm"], arm["low_req_s"])
    assert ok["itl_ms"]["p99"] <= 20 and ok["ttft_ms"]["p99"] <= 100
    assert ok["ttft_ms"]["p99"] == pytest.approx(arm["at_capacity"]["ttft_p99_ms"])
    bad = _medians(folder, arm["arm"], arm["high_req_s"])
    assert bad["itl_ms"]["p99"] > 20 or bad["ttft_ms"]["p99"] > 100


def test_reruns_give_identical_bytes(cap_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    assert main(["capacity", str(cap_dir.parent / "scenario.yaml"), "--out", str(out),
                 "--no-progress", "--tolerance", "0.1",
                 "--set", "sweep={workload.request_rate: [1, 2]}"]) == 0
    for name in FILES - {"env.json"}:
        assert (out / name).read_bytes() == (cap_dir / name).read_bytes(), name


def test_goodput_fraction_criterion(tmp_path: Path) -> None:
    out = tmp_path / "gp"
    assert main(["capacity", str(scenario(tmp_path, arms=["mixed"])), "--out", str(out),
                 "--no-progress", "--tolerance", "0.1", "--goodput-fraction", "0.9",
                 "--goodput", "ttft:50"]) == 0
    (a,) = json.loads((out / "capacity.json").read_text())["arms"]
    assert set(a["at_capacity"]) == {"goodput_fraction"}  # --slo not given: only the fraction
    assert a["at_capacity"]["goodput_fraction"] >= 0.9
    assert all(p["goodput_fraction"] < 0.9 for p in a["probes"] if not p["meets"])


@pytest.mark.parametrize(("changes", "flags", "fragment"), [
    ({"workload": tiny()["workload"]}, [],
     "workload.kind: an interference workload has no request rate to search; use a poisson"),
    ({}, ["--tolerance", "0"], "--tolerance: must be in (0, 1)"),
    ({}, ["--tolerance", "wide"], "--tolerance: 'wide' is not a number"),
    ({}, ["--slo", "itl_p42_ms=3"], "--slo: 'itl_p42_ms=3' must be METRIC_STAT_ms=LIMIT"),
    ({}, ["--slo", "ttft_p99_ms=-5"], "--slo: 'ttft_p99_ms=-5': the limit must be"),
    ({}, ["--goodput-fraction", "1.5"], "--goodput-fraction: must be in (0, 1]"),
    ({}, ["--start-rate", "0"], "--start-rate: must be > 0"),
    ({"slo": None}, [], "--slo: required"),
    ({"slo": None}, ["--goodput-fraction", "0.9"], "--goodput: --goodput-fraction needs"),
])
def test_bad_input_is_one_line_exit_2_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any],
    flags: list[str], fragment: str,
) -> None:
    path = scenario(tmp_path, **changes)
    rc = main(["capacity", str(path), "--out", str(tmp_path / "cap"), "--no-progress", *flags])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and fragment in err, err
    assert not (tmp_path / "cap").exists()


def test_a_start_near_the_minimum_rate_ends_below_min_rate(tmp_path: Path) -> None:
    # an SLO no rate meets, from a start one step above the workloads' minimum rate: the
    # search stops at the minimum (below_min_rate) instead of probing a rate it would refuse
    out = tmp_path / "low"
    scn = scenario(tmp_path, arms=["mixed"], slo={"itl_p99_ms": 1e-9})
    assert main(["capacity", str(scn), "--out", str(out), "--no-progress",
                 "--start-rate", "1.5e-6"]) == 0
    (a,) = json.loads((out / "capacity.json").read_text())["arms"]
    assert a["status"] == "below_min_rate" and a["capacity_req_s"] is None
    assert [p["rate"] for p in a["probes"]] == [1.5e-6]
