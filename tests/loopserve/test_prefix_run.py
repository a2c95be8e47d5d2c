"""A run sweeping cache.enable_prefix_caching on a shared-prefix workload: the resolved
config records the flag, summary.json and the report carry vLLM's hit rate and blocks
evicted for the cached runs only, and caching makes the same tokens faster."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from loopserve.cli import main
from loopserve.outputs.rundata import load_run
from tests.scenario_fixtures import TINY, tiny, write_scenario


def test_prefix_sweep_summary_report_and_tokens(tmp_path: Path) -> None:
    workload = {**TINY["workload"], "decode_output_tokens": 24,
                "inject": [{"at_decode_tokens": k, "prompt_tokens": 24, "output_tokens": 3}
                           for k in (2, 10, 18)],
                "shared_prefix": {"tokens": 16, "num_prefixes": 1}}
    data = tiny(repeats=1, workload=workload,
                sweep={"cache.enable_prefix_caching": [False, True]})
    out = tmp_path / "run"
    assert main(["run", str(write_scenario(tmp_path, data)), "--out", str(out),
                 "--no-progress", "--set", "outputs.tokens=true"]) == 0
    assert yaml.safe_load((out / "scenario.yaml").read_text())["cache"][
        "enable_prefix_caching"] is False  # the resolved config records the flag
    summary = json.loads((out / "summary.json").read_text())
    for row in summary["runs"]:
        cached = row["point_id"] == 1
        assert ("prefix_cache_hit_rate" in row) == cached
        if cached:
            # inject-1 and inject-2 each hit the 4 blocks of 4 tokens inject-0 published
            assert row["prefix_cache_hit_tokens"] == 2 * 16
            assert row["prefix_cache_queried_tokens"] == 2 * 8 + 3 * 24
            assert row["prefix_cache_hit_rate"] == 32 / 88
            assert row["prefix_cache_evicted_blocks"] >= 0
    run = load_run(out)
    tokens = run.tokens
    key = ["arm", "request_id", "index"]
    off = tokens[tokens.point_id == 0].set_index(key).sort_index()
    on = tokens[tokens.point_id == 1].set_index(key).sort_index()
    assert (off.token_id == on.token_id).all() and (off.exit_depth == on.exit_depth).all()
    steps = run.steps
    work = steps.groupby("point_id").num_prompt_tokens.sum()
    assert work[1] < work[0]  # the cached prefix is not computed again
    html = (out / "report.html").read_text()
    assert "<h2>Prefix cache</h2>" in html and "0.3636" in html
