"""The GPU-path measurements of the gpu-check run on the CPU through the same code (tiny
model, Triton's interpreter, graphs replayed by ``eager_capture``), and the stages' choice of
the configuration the A0/A1/A2 run uses."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from tools.gpu.check import run_stage
from tools.gpu.context import Check
from tools.gpu.graph_stages import DRY_RUN_REASON, fastest, validated
from tools.gpu.graph_table import graph_lines
from tools.gpu.graphs import graph_core, graph_tokens
from tools.gpu.sizes import SIZES
from tools.gpu.stages import STAGES

TINY = replace(SIZES["cpu"], rows=(1, 4), mixed_prompt=8, context=16, warmup=1, repeats=1,
               div_requests=3, div_prompt=12, div_tokens=4)
CPU = torch.device("cpu")


def test_graph_core_times_every_configuration_it_can_and_names_the_rest() -> None:
    res = graph_core(CPU, TINY, None)
    by = {(r["config"], r["label"]): r for r in res["rows"]}
    assert {lab for _, lab in by} == {"1", "4", "8+8"}
    for config in ("torch", "triton", "triton + graphs"):
        for lab in ("1", "4", "8+8"):
            row = by[(config, lab)]
            assert "error" not in row, row
            assert row["median_s"] > 0 and row["over_floor"] > 0
    assert by[("triton + graphs", "8+8")]["graph_counters"]["capture"] == 1
    for lab in ("1", "4", "8+8"):  # not installed here: reported, not timed
        assert "not available" in by[("flash_attn_4 + graphs", lab)]["error"]
    lines = graph_lines({"graphs": res})
    assert any(line.strip().startswith("triton + graphs") for line in lines)
    assert any("n/a" in line for line in lines if "flash_attn_4" in line)


def test_graph_tokens_replay_matches_eager() -> None:
    res = graph_tokens(CPU, TINY)
    triton = res["backends"]["triton"]
    assert triton["identical"] is True, triton
    assert triton["graph_counters"]["replay"] > 0
    assert "not available" in res["backends"]["flash_attn_4"]["error"]


def _rows(times: dict[str, float | None]) -> list[dict[str, object]]:
    return [{"config": c, "label": lab, **({} if t is None else {"median_s": t})}
            for c, t in times.items() for lab in ("1", "8")]


def test_the_runs_use_the_fastest_configuration_validated_in_this_run() -> None:
    results = {
        "graphs": {"rows": _rows({"triton": 3.0, "triton + graphs": 2.0, "flash_attn_4": 1.0,
                                  "flash_attn_4 + graphs": 0.5})},
        "graph_tokens": {"backends": {"triton": {"identical": True},
                                      "flash_attn_4": {"identical": False}}},
        "fa4": {"shapes": [{"ok": True}]},
    }
    assert validated(results) == ["triton + graphs", "flash_attn_4"]
    assert fastest(results, validated(results)) == "flash_attn_4"
    results["fa4"] = {"shapes": [{"ok": False}]}
    assert fastest(results, validated(results)) == "triton + graphs"
    results["graph_tokens"]["backends"]["triton"] = {"error": "boom"}
    assert fastest(results, validated(results)) is None


def test_the_dry_run_skips_the_gpu_path_with_its_reason_even_out_of_time(
        tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    check = Check(device="cpu", out=tmp_path / "out", budget_s=1.0, wheels_dir=tmp_path / "none",
                  site_dir=tmp_path / "site", only=None, scratch=scratch)
    gpu_path = [s for s in STAGES if s.cuda_only == DRY_RUN_REASON]  # the GPU path's stages
    assert [s.name for s in gpu_path] == ["fa4", "graphs", "graph_tokens", "graph_runs"]
    for spec in gpu_path:
        run_stage(check, spec, [])
    assert {(s.status, s.detail) for s in check.stages} == {("skipped", DRY_RUN_REASON)}
