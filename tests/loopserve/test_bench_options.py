"""`loopserve bench serve`'s vLLM options against the stub server, each checked with numbers
the test computes itself: ramp-up send times, warm-ups in no metric, the detailed lists equal
to the per-request outcomes, the chat backend, shared-prefix prompts, metadata, label, the
result file's name, and round-robin over two base URLs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loopserve.bench import client
from loopserve.bench.datasets import sample_prefix_repetition
from loopserve.bench.result_file import PER_REQUEST_KEYS
from loopserve.bench.schedule import ramp_up_offsets
from loopserve.bench.stub import Stub, running_stub
from loopserve.cli import main

RANDOM = ["--dataset-name", "random", "--random-input-len", "6", "--random-output-len", "4",
          "--no-progress"]


def _bench(url: str | list[str], tmp_path: Path, *args: str) -> dict[str, Any]:
    urls = [url] if isinstance(url, str) else url
    out = tmp_path / "r.json"
    argv = ["bench", "serve", *(a for u in urls for a in ("--base-url", u)),
            "--result-file", str(out), *args]
    assert main(argv) == 0
    return dict(json.loads(out.read_text()))


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_ramp_up_send_times_follow_the_rates(strategy: str, tmp_path: Path) -> None:
    n, lo, hi = 8, 4, 16
    stub = Stub()
    with running_stub(stub) as url:
        r = _bench(url, tmp_path, *RANDOM, "--num-prompts", str(n), "--burstiness", "inf",
                   "--ramp-up-strategy", strategy, "--ramp-up-start-rps", str(lo),
                   "--ramp-up-end-rps", str(hi), "--save-detailed")
    p = np.arange(n) / (n - 1)
    rates = lo + (hi - lo) * p if strategy == "linear" else lo * (hi / lo) ** p
    expected = np.concatenate(([0.0], np.cumsum(1.0 / rates[1:])))
    # a send waits for its absolute offset: never early, late only by the event loop's lag
    late = np.array(r["start_times"]) - expected
    assert late.min() > -0.002 and late.max() < 0.1, (r["start_times"], expected)
    arrived = np.array([t for t, _, _ in stub.received])
    assert np.allclose(arrived - arrived[0], expected, atol=0.1)
    assert (r["ramp_up_strategy"], r["ramp_up_start_rps"], r["ramp_up_end_rps"]) == (
        strategy, lo, hi)
    assert r["request_rate"] == "inf" and r["completed"] == n
    assert [e["rps"] for e in r["rps_change_events"]] == list(range(lo, hi + 1))


def test_ramp_up_gamma_gaps_are_the_seeded_draws() -> None:
    rates = 2 + 8 * np.arange(1, 50) / 49
    gaps = np.random.default_rng(7).gamma(0.5, 1.0 / (rates * 0.5))
    got = ramp_up_offsets(50, "linear", 2, 10, 0.5, seed=7)
    assert got[0] == 0.0 and np.allclose(np.diff(got), gaps)


@pytest.mark.parametrize(("args", "message"), [
    (["--request-rate", "5", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1",
      "--ramp-up-end-rps", "4"], "--request-rate: not with --ramp-up-strategy"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1"],
     "--ramp-up-start-rps: --ramp-up-strategy needs both"),
    (["--ramp-up-end-rps", "4"], "--ramp-up-strategy: required with"),
    (["--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "0",
      "--ramp-up-end-rps", "4"], "--ramp-up-start-rps: needs 0 <"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "8", "--ramp-up-end-rps", "4"],
     "--ramp-up-start-rps: needs 0 <"),
    (["--metadata", "a=1", "a=2"], "--metadata: key 'a' is given twice"),
    (["--metadata", "duration=1"], "--metadata: key 'duration' is a result key"),
    (["--metadata", "novalue"], "--metadata: 'novalue' must be KEY=VALUE"),
    (["--result-file", "x.json", "--result-dir", "d"], "--result-file: give either"),
    (["--result-filename", "a/b.json"], "--result-filename: 'a/b.json' must be a file name"),
])
def test_clashing_or_bad_options_are_one_line_exit_2(
        args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    stub = Stub()
    with running_stub(stub) as url:
        rc = main(["bench", "serve", "--base-url", url, *RANDOM, "--num-prompts", "2", *args])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"loopserve: error: {message}") and err.count("\n") == 1
    assert stub.received == [] and list(tmp_path.iterdir()) == []


def test_warmups_are_excluded_from_every_metric(tmp_path: Path) -> None:
    def run(warmups: int) -> tuple[dict[str, Any], Stub]:
        stub = Stub(slow_first=2, slow_s=0.6)  # the first two requests to arrive are slow
        with running_stub(stub) as url:
            r = _bench(url, tmp_path, *RANDOM, "--num-prompts", "4", "--save-detailed",
                       "--num-warmups", str(warmups), "--percentile-metrics",
                       "ttft,tpot,itl,e2el")
        return r, stub

    r, stub = run(2)
    assert len(stub.received) == 6 and r["num_warmups"] == 2
    # the two warm-ups are copies of the first request, sent before the measured ones
    assert [b["prompt"] for _, _, b in stub.received[:3]] == [stub.received[2][2]["prompt"]] * 3
    assert (r["completed"], r["total_output_tokens"], r["total_input_tokens"]) == (4, 16, 24)
    assert len(r["ttfts"]) == 4 and max(r["ttfts"]) < 0.3 and r["duration"] < 0.5
    assert r["max_output_tokens_per_s"] == 16 and r["max_concurrent_requests"] == 4
    ttfts = np.array(r["ttfts"])
    e2el = ttfts + np.array([sum(g) for g in r["itls"]])
    assert r["mean_ttft_ms"] == pytest.approx(ttfts.mean() * 1e3)
    assert r["p99_e2el_ms"] == pytest.approx(np.percentile(e2el, 99) * 1e3, rel=1e-6)
    assert r["request_throughput"] == pytest.approx(4 / r["duration"])
    control, _ = run(0)  # the same slow requests measured: the check above can fail
    assert max(control["ttfts"]) > 0.55 and control["p99_ttft_ms"] > 550


def test_detailed_lists_equal_the_per_request_outcomes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    real = client.run

    async def spy(*a: Any, **k: Any) -> Any:
        got = await real(*a, **k)
        seen.append(got[0])
        return got

    monkeypatch.setattr(client, "run", spy)
    with running_stub(Stub(itl_s=0.002)) as url:
        r = _bench(url, tmp_path, *RANDOM, "--num-prompts", "5", "--random-range-ratio", "0.5",
                   "--save-detailed")
        plain = _bench(url, tmp_path, *RANDOM, "--num-prompts", "5")
    (outs, _) = seen
    assert r["input_lens"] == [o.prompt_len for o in outs]
    assert r["output_lens"] == [o.output_tokens for o in outs]
    assert r["ttfts"] == [o.ttft for o in outs] and r["itls"] == [list(o.itl) for o in outs]
    assert r["start_times"] == [o.start_s for o in outs]
    assert r["errors"] == [""] * 5 and r["generated_texts"] == [o.generated_text for o in outs]
    assert len(set(r["input_lens"])) > 1
    assert [len(g) for g in r["itls"]] == [n - 1 for n in r["output_lens"]]
    assert not set(plain) & {*PER_REQUEST_KEYS, "start_times"}


def test_chat_backend_sends_messages_and_skips_the_role_chunk(tmp_path: Path) -> None:
    stub = Stub(itl_s=0.002)
    with running_stub(stub) as url:
        r = _bench(url, tmp_path, *RANDOM, "--num-prompts", "3", "--backend", "openai-chat",
                   "--save-detailed")
    assert {path for _, path, _ in stub.received} == {"/v1/chat/completions"}
    body = stub.received[0][2]
    assert isinstance(body["messages"][0]["content"], str)
    assert body["messages"][0]["role"] == "user" and body["max_completion_tokens"] == 4
    assert r["backend"] == r["endpoint_type"] == "openai-chat" and r["completed"] == 3
    # four content chunks: three gaps, none for the role chunk before them
    assert [len(g) for g in r["itls"]] == [3] * 3 and r["generated_texts"] == ["xxxx"] * 3
    assert r["output_lens"] == [4] * 3 and min(min(g) for g in r["itls"]) > 0.001


def test_prefix_repetition_prompts_share_their_prefixes(tmp_path: Path) -> None:
    reqs = sample_prefix_repetition(7, 5, 3, 2, 9, vocab_size=1000, seed=4)
    assert len(reqs) == 7 and {(r.prompt_len, r.output_len) for r in reqs} == {(8, 9)}
    prefixes = [tuple(r.prompt[:5]) for r in reqs]
    assert len(set(prefixes)) == 2 and sorted(prefixes.count(p) for p in set(prefixes)) == [3, 4]
    assert len({tuple(r.prompt) for r in reqs}) == 6  # 2 x 3 distinct, one repeated
    with pytest.raises(ValueError, match="^--prefix-repetition-num-prefixes: 8 is more than"):
        sample_prefix_repetition(7, 5, 3, 8, 9, vocab_size=1000, seed=4)
    stub = Stub()
    with running_stub(stub) as url:
        r = _bench(url, tmp_path, "--dataset-name", "prefix_repetition", "--num-prompts", "6",
                   "--prefix-repetition-prefix-len", "10", "--prefix-repetition-suffix-len",
                   "4", "--prefix-repetition-num-prefixes", "3",
                   "--prefix-repetition-output-len", "2", "--no-progress")
    sent = [b["prompt"] for _, _, b in stub.received]
    assert len({tuple(p[:10]) for p in sent}) == 3 and {len(p) for p in sent} == {14}
    assert r["total_input_tokens"] == 6 * 14 and r["total_output_tokens"] == 12


def test_metadata_label_and_vllms_file_name(tmp_path: Path) -> None:
    with running_stub(Stub()) as url:
        rc = main(["bench", "serve", "--base-url", url, *RANDOM, "--num-prompts", "2",
                   "--request-rate", "50", "--max-concurrency", "2", "--label", "mine",
                   "--metadata", "version=0.3", "tp=1", "--result-dir", str(tmp_path / "d")])
    assert rc == 0
    (path,) = (tmp_path / "d").iterdir()
    r = json.loads(path.read_text())
    assert path.name == f"mine-50.0qps-concurrency2-stub-{r['date']}.json"
    assert (r["version"], r["tp"], r["label"], r["request_rate"]) == ("0.3", "1", "mine", 50.0)
    keys = list(r)
    assert keys[:7] == ["date", "endpoint_type", "backend", "label", "model_id",
                        "tokenizer_id", "num_prompts"]
    assert keys[7:10] == ["version", "tp", "request_rate"]


def test_save_result_alone_writes_vllms_name_in_the_working_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with running_stub(Stub()) as url:
        assert main(["bench", "serve", "--base-url", url, *RANDOM, "--num-prompts", "1",
                     "--save-result", "--backend", "openai-chat"]) == 0
    (path,) = tmp_path.iterdir()
    r = json.loads(path.read_text())
    assert path.name == f"openai-chat-infqps-stub-{r['date']}.json" and r["label"] is None


@pytest.mark.parametrize("joined", [True, False])
def test_two_base_urls_share_the_requests_round_robin(joined: bool, tmp_path: Path) -> None:
    a, b = Stub(), Stub()
    with running_stub(a) as url_a, running_stub(b) as url_b:
        urls = f"{url_a},{url_b}" if joined else [url_a, url_b]
        r = _bench(urls, tmp_path, *RANDOM, "--num-prompts", "7", "--num-warmups", "2")
    assert (len(a.received), len(b.received)) == (4 + 1, 3 + 1)
    assert r["base_urls"] == [url_a, url_b] and r["completed"] == 7
