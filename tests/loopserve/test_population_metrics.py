"""RFC §6 metrics: the decode population's ITL/TPOT apart from the injected requests', prompt
depths per step, and prompt token-loops per decode inter-token gap, on hand-built rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.core.records import RequestRecord, RunRecords
from engine.core.results import StepRecord, TokenEvent
from loopserve.cli import main
from loopserve.stats.metrics import summarize
from loopserve.stats.population import itl_key
from tests.scenario_fixtures import tiny, write_scenario


def _step(i: int, end: float, stage: str, kind: str, decode: int, prompt: int,
          tokens: int, depths: str) -> StepRecord:
    return StepRecord(i, end - 0.5, end, stage, kind, 1, decode, prompt, tokens, 0, depths,
                      kind == "mixed")


def _records() -> RunRecords:
    steps = [
        _step(0, 1.0, "PREFILL", "prefill", 0, 2, 24, "0:2;1:2;2:2;3:2"),  # 2 chunks x 4 depths
        _step(1, 2.0, "RECURRENT", "mixed", 1, 1, 10, "0:1;2:1"),  # 10 tokens x 1 depth
        _step(2, 3.0, "CODA", "coda", 1, 0, 0, ""),
        _step(3, 4.0, "RECURRENT", "prompt", 0, 1, 6, "1:1"),  # 6 token-loops
        _step(4, 5.0, "CODA", "coda", 2, 0, 0, ""),
    ]
    tokens = [TokenEvent("d", 0, 0.5, 1, 4, False, None),
              TokenEvent("d", 1, 3.0, 1, 4, False, None),   # gap (0.5, 3]: steps 0-2
              TokenEvent("d", 2, 5.0, 1, 4, True, "length"),  # gap (3, 5]: steps 3-4
              TokenEvent("x", 0, 3.0, 1, 4, False, None),
              TokenEvent("x", 1, 5.0, 1, 4, True, "length")]
    reqs = [RequestRecord("d", 0.0, 4, 3, 0.5, 5.0, False, "length", 0.0),
            RequestRecord("x", 1.0, 24, 2, 3.0, 5.0, True, "length", 1.0)]
    return RunRecords(steps=steps, tokens=tokens, requests=reqs)


def test_population_metrics_by_hand() -> None:
    m = summarize(_records(), num_depths=4)
    # prompt item-depths of the steps with prompt work: 8, 1, 1
    assert m["prompt_depths_per_step"] == {"mean": pytest.approx(10 / 3), "p50": 1.0,
                                           "max": 8.0}
    # decode-population gaps: 24 tokens x 4 depths + 10 = 106 and 6 token-loops
    gap = m["prompt_token_loops_per_decode_gap"]
    assert gap["p50"] == pytest.approx(56.0) and gap["p99"] == pytest.approx(6 + 0.99 * 100)
    assert m["decode_itl_ms"]["max"] == pytest.approx(2500.0)
    assert m["decode_itl_ms"]["p50"] == pytest.approx(2250.0)
    assert m["injected_itl_ms"]["max"] == pytest.approx(2000.0)
    assert m["decode_tpot_ms"]["mean"] == pytest.approx(2250.0)
    assert m["injected_tpot_ms"]["mean"] == pytest.approx(2000.0)
    assert m["itl_ms"]["max"] == pytest.approx(2500.0)  # every request's gaps pooled
    assert m["itl_ms"]["p50"] == pytest.approx(2000.0)
    assert itl_key(m) == "decode_itl_ms"  # type: ignore[arg-type]


def test_without_injection_no_population_split() -> None:
    rec = _records()
    rec.requests = [r for r in rec.requests if not r.injected]
    m = summarize(rec, num_depths=4)
    assert "decode_itl_ms" not in m and itl_key(m) == "itl_ms"  # type: ignore[arg-type]


def test_summary_and_report_carry_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["run", str(write_scenario(tmp_path, tiny(repeats=1))), "--out", str(out),
                 "--no-progress"]) == 0
    import json
    med = json.loads((out / "summary.json").read_text())["medians"]
    atomic = next(m for m in med if m["arm"] == "atomic")
    per_depth = next(m for m in med if m["arm"] == "per_depth")
    assert atomic["prompt_depths_per_step"]["p50"] >= 4  # atomic chunks run all D depths
    assert per_depth["prompt_depths_per_step"]["max"] >= 1
    assert per_depth["prompt_depths_per_step"]["p50"] == 1
    for m in med:
        assert m["decode_itl_ms"]["p99"] is not None and m["injected_itl_ms"]["p99"] is not None
    html = (out / "report.html").read_text()
    for label in ("decode ITL p99", "injected ITL p99", "prompt depths/step mean",
                  "prompt token-loops/decode gap p99"):
        assert label in html
