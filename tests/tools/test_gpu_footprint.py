"""The gpu-check's footprint stage off the GPU: the estimate-against-peak comparison it
records, and how the stage turns a measurement into gpu_check.json's entry and its status
(the measurement itself needs CUDA; the dry run skips the stage, tests/tools/test_gpu_check.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.core.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.core.shapes import SMALL
from loopserve.plan import footprint as fp
from tools.gpu import footprint_measure
from tools.gpu.context import Check
from tools.gpu.footprint_stage import footprint
from tools.gpu.proc import Proc, StageFailed

CFG = EngineConfig(SMALL, SchedulerConfig(arm="mixed", max_num_seqs=8,
                                          max_num_batched_tokens=128, prefill_chunk_size=64),
                   CacheConfig(num_blocks=640, block_size=16))


def test_compare_holds_the_peak_within_the_multiple() -> None:
    est = fp.device_bytes(CFG, 2, 256, "triton")
    assert footprint_measure.compare(CFG, est // 2 + 1, 2, 256, "triton")["ok"]
    row = footprint_measure.compare(CFG, est, 2, 256, "triton")
    assert row["ok"] and row["estimate_bytes"] == est and row["estimate_over_peak"] == 1.0
    assert not footprint_measure.compare(CFG, est + 1, 2, 256, "triton")["ok"]  # missed peak
    assert not footprint_measure.compare(CFG, est // 3, 2, 256, "triton")["ok"]  # too loose


def _check(tmp_path: Path, arms: dict[str, dict[str, object]]) -> Check:
    c = Check(device="cuda", out=tmp_path / "out", budget_s=60, wheels_dir=tmp_path,
              site_dir=tmp_path, only=None, scratch=tmp_path)

    def python(args: list[str], timeout: float, *, echo: bool = True) -> Proc:
        dest = Path(args[args.index("--json") + 1])
        dest.write_text(json.dumps({"multiple": 2.0, "arms": arms}))
        return Proc(0, "", False)

    c.python = python  # type: ignore[method-assign]
    return c


def _arm(est: int, peak: int) -> dict[str, object]:
    return {"estimate_bytes": est, "max_memory_allocated_bytes": peak,
            "estimate_over_peak": round(est / peak, 3), "ok": 1 <= est / peak <= 2}


def test_the_stage_records_both_numbers_per_arm(tmp_path: Path) -> None:
    c = _check(tmp_path, {"mixed": _arm(3 * 2**30, 2 * 2**30)})
    detail = footprint(c, 60)
    assert c.results["footprint"]["arms"]["mixed"]["max_memory_allocated_bytes"] == 2 * 2**30
    assert detail == "estimate/peak mixed 3.00/2.00 GiB (x1.5)"


def test_the_stage_fails_when_an_estimate_misses_the_peak(tmp_path: Path) -> None:
    c = _check(tmp_path, {"atomic": _arm(2**30, 2 * 2**30)})
    with pytest.raises(StageFailed, match="estimate outside"):
        footprint(c, 60)
    assert "footprint" in c.results  # recorded all the same
