"""vLLM's result flags on `loopserve run`: --percentile-metrics and --metric-percentiles pick
vllm_results.json's keys, --goodput sets the SLOs (the scenario's slo by default), and every
value is checked against the run's own request and token rows computed here with numpy;
bad values are one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loopserve.cli import main
from loopserve.outputs.rundata import load_run
from tests.scenario_fixtures import tiny, write_scenario

POISSON = {"kind": "poisson", "num_requests": 8, "request_rate": 200.0,
           "prompt_tokens": {"dist": "uniform", "low": 4, "high": 20},
           "output_tokens": {"dist": "uniform", "low": 1, "high": 6}}
COMMON = {"duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
          "request_throughput", "request_goodput", "output_throughput",
          "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests",
          "arm", "target", "point_id", "repeat", "valid"}


def _run(tmp_path: Path, *flags: str, **changes: Any) -> list[dict[str, Any]]:
    path = write_scenario(tmp_path, tiny(workload=POISSON, repeats=1, **changes))
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--no-progress", *flags]) == 0
    return list(json.loads((out / "vllm_results.json").read_text()))


def test_chosen_metrics_and_percentiles_match_the_runs_own_rows(tmp_path: Path) -> None:
    results = _run(tmp_path, "--percentile-metrics", "ttft,e2el,tpot",
                   "--metric-percentiles", "50,99.9", "--goodput", "ttft:30", "e2el:70",
                   "--set", "outputs.tokens=true")
    run = load_run(tmp_path / "run")
    reqs, toks = run.requests, run.tokens
    for r in results:
        assert set(r) == COMMON | {f"{s}_{m}_ms" for s in ("mean", "median", "std", "p50",
                                                          "p99.9") for m in ("ttft", "e2el",
                                                                             "tpot")}
        q = reqs[reqs.arm == r["arm"]]
        t = toks[toks.arm == r["arm"]]
        first = t[t["index"] == 0].set_index("request_id").time_s
        last = t.groupby("request_id").time_s.max()
        arrival = q.set_index("request_id").arrival_s
        ttft_s = (first - arrival).dropna() * 1e3  # aligned on request_id
        e2el_s = (last - arrival).dropna() * 1e3
        ttft, e2el = ttft_s.to_numpy(), e2el_s.to_numpy()
        n_out = t.groupby("request_id").size()
        many = n_out[n_out > 1].index
        tpot = ((last[many] - first[many]) / (n_out[many] - 1)).to_numpy() * 1e3
        span = q.finish_s.max() - q.arrival_s.min()
        assert r["duration"] == pytest.approx(span)
        assert (r["completed"], r["failed"]) == (8, 0)
        assert r["total_input_tokens"] == q.prompt_tokens.sum()
        assert r["total_output_tokens"] == len(t)
        assert r["request_throughput"] == pytest.approx(8 / span)
        assert r["output_throughput"] == pytest.approx(len(t) / span)
        assert r["total_token_throughput"] == pytest.approx(
            (q.prompt_tokens.sum() + len(t)) / span)
        for name, v in (("ttft", ttft), ("e2el", e2el), ("tpot", tpot)):
            assert r[f"mean_{name}_ms"] == pytest.approx(v.mean()), name
            assert r[f"median_{name}_ms"] == pytest.approx(np.median(v)), name
            assert r[f"std_{name}_ms"] == pytest.approx(v.std()), name
            assert r[f"p99.9_{name}_ms"] == pytest.approx(np.percentile(v, 99.9)), name
        good = int(((ttft_s <= 30) & (e2el_s <= 70)).sum())
        assert 0 < good < 8  # the SLOs split this run's requests
        assert r["request_goodput"] == pytest.approx(good / span)


def test_goodput_defaults_to_the_scenario_slo(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with_slo = _run(tmp_path / "a", slo={"ttft_p99_ms": 1e6, "itl_p99_ms": 1e6})
    assert all(r["request_goodput"] == r["request_throughput"] for r in with_slo)
    assert {"p50_itl_ms", "p90_tpot_ms", "p99_e2el_ms"} <= set(with_slo[0])  # the defaults
    without = _run(tmp_path / "b")
    assert all(r["request_goodput"] is None for r in without)


@pytest.mark.parametrize(("flags", "fragment"), [
    (["--metric-percentiles", "50,101"], "--metric-percentiles: 101 is outside [0, 100]"),
    (["--metric-percentiles", "p99"], "--metric-percentiles: 'p99' is not a number"),
    (["--percentile-metrics", "ttft,latency"], "--percentile-metrics: unknown metric 'latency'"),
    (["--goodput", "itl:5"], "--goodput: 'itl:5' must be ttft:MS"),
    (["--goodput", "ttft:-1"], "--goodput: 'ttft:-1': the SLO must be a finite number >= 0 ms"),
    (["--goodput", "ttft:soon"], "--goodput: 'ttft:soon': 'soon' is not a number"),
])
def test_bad_flag_values_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], fragment: str,
) -> None:
    path = write_scenario(tmp_path, tiny(workload=POISSON, repeats=1))
    rc = main(["run", str(path), "--out", str(tmp_path / "run"), "--no-progress", *flags])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and fragment in err, err
    assert not (tmp_path / "run").exists()


def test_bench_serve_checks_its_flags_before_any_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc = main(["bench", "serve", "--base-url", "http://127.0.0.1:9", "--dataset-name", "random",
               "--metric-percentiles", "99,250"])
    err = capsys.readouterr().err
    assert rc == 2 and "--metric-percentiles: 250 is outside [0, 100]" in err, err
