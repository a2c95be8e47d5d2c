"""`loopserve bench serve` against the tiny server: it reproduces the server's token counts,
writes every vLLM key, and counts failed requests without stopping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopserve.bench import client
from loopserve.bench.datasets import SampleRequest
from loopserve.bench.synthetic import write
from loopserve.cli import main
from tests.loopserve.test_bench_results import VLLM_KEYS
from tests.reference import fixtures  # noqa: F401 - one torch thread
from tests.server_helpers import Running, running_server


@pytest.fixture(scope="module")
def srv() -> Iterator[Running]:
    with running_server() as running:
        yield running


def test_bench_serve_reproduces_server_token_counts(srv: Running, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = write(tmp_path / "sg.json", 40, seed=5, prompt_words=8, reply_words=4)
    before = {k: srv.metric(f"loopserve:{k}_total") for k in ("prompt_tokens",
                                                               "generation_tokens")}
    out = tmp_path / "result.json"
    assert main(["bench", "serve", "--base-url", srv.url, "--dataset-name", "sharegpt",
                 "--dataset-path", str(data), "--num-prompts", "24", "--request-rate", "40",
                 "--seed", "1", "--max-concurrency", "12", "--ignore-eos", "--save-detailed",
                 "--result-file", str(out), "--no-progress"]) == 0
    r = json.loads(out.read_text())
    assert set(r) >= VLLM_KEYS
    assert (r["completed"], r["failed"]) == (24, 0)
    assert r["total_input_tokens"] == srv.metric("loopserve:prompt_tokens_total") - before[
        "prompt_tokens"]
    assert r["total_output_tokens"] == srv.metric("loopserve:generation_tokens_total") - before[
        "generation_tokens"]
    assert all(len(itl) == n - 1 for itl, n in zip(r["itls"], r["output_lens"], strict=True))
    assert r["model_id"] == "tiny" and r["max_concurrency"] == 12
    assert "Successful requests:                     24" in capsys.readouterr().out


def test_failed_requests_are_counted_not_fatal(srv: Running) -> None:
    reqs = [SampleRequest([1, 2, 3], 3, 4), SampleRequest([1] * 1100, 1100, 4),
            SampleRequest("hello", 5, 3)]
    outcomes, _ = asyncio.run(client.run(srv.url, "tiny", reqs, [0.0, 0.0, 0.0],
                                         progress=False))
    assert [o.success for o in outcomes] == [True, False, True]
    assert outcomes[1].error.startswith("HTTP 400: ") and "prompt" in outcomes[1].error
    assert [o.output_tokens for o in outcomes] == [4, 0, 3]
    down, _ = asyncio.run(client.run("http://127.0.0.1:9", "tiny", reqs[:1], [0.0],
                                     progress=False))
    assert not down[0].success and "Connect" in down[0].error


@pytest.mark.parametrize(("args", "first_line"), [
    (["--request-rate", "-1"], "loopserve: error: --request-rate: must be a number >= 0"),
    (["--num-prompts", "x"], "loopserve: error: --num-prompts: 'x' is not an integer"),
    (["--dataset-name", "sharegpt"],
     "loopserve: error: --dataset-path: required with --dataset-name sharegpt"),
    (["--goodput", "ttft"], "loopserve: error: --goodput: 'ttft' must be ttft:MS"),
])
def test_bad_flags_are_one_line_exit_2(srv: Running, args: list[str], first_line: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "serve", "--base-url", srv.url, "--model", "tiny", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(first_line) and "\n" not in err


def test_client_against_the_stub_server() -> None:
    from tools.bench_serving import client_throughput

    r = client_throughput(300, 32)
    assert r["completed"] == 300 and r["requests_per_s"] > 0


def test_two_real_replicas_share_a_benchmark_round_robin(srv: Running, tmp_path: Path) -> None:
    with running_server() as other:
        before = [(s.metric("loopserve:prompt_tokens_total"),
                   s.metric("loopserve:generation_tokens_total")) for s in (srv, other)]
        out = tmp_path / "two.json"
        assert main(["bench", "serve", "--base-url", f"{srv.url},{other.url}",
                     "--dataset-name", "random", "--random-input-len", "6",
                     "--random-output-len", "4", "--random-range-ratio", "0.5",
                     "--num-prompts", "6", "--ignore-eos",
                     "--save-detailed", "--result-file", str(out), "--no-progress"]) == 0
        after = [(s.metric("loopserve:prompt_tokens_total"),
                  s.metric("loopserve:generation_tokens_total")) for s in (srv, other)]
    r = json.loads(out.read_text())
    assert r["completed"] == 6 and r["base_urls"] == [srv.url, other.url]
    # requests 0, 2, 4 to the first replica, 1, 3, 5 to the second
    for k, ((p0, g0), (p1, g1)) in enumerate(zip(before, after, strict=True)):
        assert p1 - p0 == sum(r["input_lens"][k::2]) and g1 - g0 == sum(r["output_lens"][k::2])
    assert r["input_lens"][0::2] != r["input_lens"][1::2]  # the split is visible
