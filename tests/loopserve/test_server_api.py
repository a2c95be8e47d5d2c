"""`loopserve serve` over HTTP on the tiny model: the real `openai` client, concurrency,
disconnects, overload and every bad-request kind (loopback, ephemeral ports, bounded)."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx2
import pytest
from openai import AsyncOpenAI, OpenAI

from engine.core.request import SamplingParams
from engine.llm import LLM
from tests.reference import fixtures  # noqa: F401 - one torch thread, as the other engine tests
from tests.server_helpers import Running, running_server, server_log


@pytest.fixture(scope="module")
def srv() -> Iterator[Running]:
    with running_server() as running:
        yield running


@pytest.fixture(scope="module")
def small() -> Iterator[Running]:
    """Two running slots, two waiting places, a 64-block cache (256 tokens of lifetime)."""
    with running_server(max_num_seqs=2, max_waiting=2, num_blocks=64) as running:
        yield running


def _client(r: Running) -> OpenAI:
    return OpenAI(base_url=r.url + "/v1", api_key="none", max_retries=0, timeout=60)


def _ids(text: str) -> list[int]:
    """The byte-level fallback is exact for the tiny model's ids (all below 128)."""
    return list(text.encode("utf-8"))


@pytest.mark.parametrize("settings", [
    {"temperature": 0.0},
    {"temperature": 0.8, "top_p": 0.9, "seed": 7},
])
def test_openai_client_gets_the_tokens_of_llm_generate(srv: Running, settings: dict) -> None:
    prompt = [3, 14, 15, 9, 26, 5, 35]
    want = LLM("tiny", arm="mixed", seed=0).generate(
        [prompt], SamplingParams(max_tokens=12, **settings))[0].output_token_ids
    client = _client(srv)
    full = client.completions.create(model="tiny", prompt=prompt, max_tokens=12, **settings)
    assert _ids(full.choices[0].text) == want
    assert full.choices[0].finish_reason == "length"
    assert (full.usage.prompt_tokens, full.usage.completion_tokens) == (len(prompt), 12)
    chunks = list(client.completions.create(
        model="tiny", prompt=prompt, max_tokens=12, stream=True,
        stream_options={"include_usage": True}, **settings))
    content = [c for c in chunks if c.choices]
    assert len(content) == 12  # one event per token
    assert _ids("".join(c.choices[0].text for c in content)) == want
    assert [c.choices[0].finish_reason for c in content] == [None] * 11 + ["length"]
    assert len({c.id for c in chunks}) == 1
    assert chunks[-1].usage.completion_tokens == 12 and not chunks[-1].choices


def test_text_prompt_and_stop_string(srv: Running) -> None:
    client = _client(srv)
    free = client.completions.create(model="tiny", prompt="hello", max_tokens=16, temperature=0)
    text = free.choices[0].text
    want = LLM("tiny", arm="mixed", seed=0).generate(
        [[b % 64 for b in b"hello"]], SamplingParams(max_tokens=16))[0].output_token_ids
    assert _ids(text) == want
    stop = text[5:7]
    cut = client.completions.create(model="tiny", prompt="hello", max_tokens=16,
                                    temperature=0, stop=[stop])
    assert cut.choices[0].text == text[:text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    srv.wait_metric("loopserve:kv_blocks_in_use", 0)


def test_32_concurrent_streams_complete(srv: Running) -> None:
    async def one(client: AsyncOpenAI, i: int) -> tuple[int, int, int | None]:
        stream = await client.completions.create(
            model="tiny", prompt=[i % 60 + 1, 2, 3], max_tokens=4 + i % 7, temperature=0,
            stream=True, stream_options={"include_usage": True})
        n, used = 0, None
        async for c in stream:
            n += bool(c.choices)
            used = c.usage.completion_tokens if c.usage else used
        return 4 + i % 7, n, used

    async def main() -> list[tuple[int, int, int | None]]:
        client = AsyncOpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        try:
            return await asyncio.wait_for(
                asyncio.gather(*(one(client, i) for i in range(32))), timeout=60)
        finally:
            await client.close()

    before = srv.metric("loopserve:request_success_total", finished_reason="length")
    for want, got, used in asyncio.run(main()):
        assert got == used == want
    assert srv.metric("loopserve:request_success_total", finished_reason="length") == before + 32


def _send(r: Running, body: dict) -> http.client.HTTPConnection:
    u = urlsplit(r.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    return conn


@pytest.mark.parametrize("stream", [True, False])
def test_disconnect_aborts_and_frees_blocks(srv: Running, stream: bool) -> None:
    aborted = srv.metric("loopserve:request_success_total", finished_reason="abort")
    conn = _send(srv, {"prompt": [1, 2, 3, 4], "max_tokens": 900, "temperature": 0,
                       "stream": stream})
    if stream:
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.readline().startswith(b"data: ")  # tokens are flowing
    else:
        srv.wait_metric("loopserve:num_requests_running", 1)
    assert srv.metric("loopserve:kv_blocks_in_use") > 0
    conn.sock.close()  # the client goes away mid-request
    conn.close()
    srv.wait_metric("loopserve:request_success_total", aborted + 1, finished_reason="abort")
    srv.wait_metric("loopserve:kv_blocks_in_use", 0)
    assert srv.service.in_flight == 0


def test_overload_answers_503_and_loses_no_accepted_request(small: Running) -> None:
    results: list[tuple[int, str, dict]] = []

    def one(i: int) -> None:
        with httpx2.Client(timeout=60) as c:
            r = c.post(small.url + "/v1/completions", json={
                "prompt": [i + 1, 2], "max_tokens": 30, "temperature": 0, "stream": False})
            results.append((r.status_code, r.headers.get("retry-after", ""), r.json()))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert len(results) == 12
    ok = [b for s, _, b in results if s == 200]
    busy = [(h, b) for s, h, b in results if s == 503]
    assert len(ok) + len(busy) == 12 and busy and len(ok) >= 2
    assert all(b["usage"]["completion_tokens"] == 30 for b in ok)
    assert all(h == "1" and b["error"]["code"] == "overloaded" for h, b in busy)
    small.wait_metric("loopserve:kv_blocks_in_use", 0)


BAD = [
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": [1, "a"]}, "prompt"),
    ({"prompt": [999]}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": ["a", [1, 2]]}, "prompt"),
    ({"prompt": ["a"] * 257}, "prompt"),
    ({"prompt": "x", "max_tokens": -3}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "temperature": 2.5}, "temperature"),
    ({"prompt": "x", "temperature": -1}, "temperature"),
    ({"prompt": "x", "top_p": 0}, "top_p"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "x", "n": 0}, "n"),
    ({"prompt": "x", "n": 65}, "n"),
    ({"prompt": "x", "best_of": 3}, "best_of"),
    ({"prompt": "x", "echo": True}, "echo"),
    ({"prompt": "x", "logprobs": 21}, "logprobs"),
    ({"prompt": "x", "logprobs": -1}, "logprobs"),
    ({"prompt": "x", "presence_penalty": 2.5}, "presence_penalty"),
    ({"prompt": "x", "frequency_penalty": -3}, "frequency_penalty"),
    ({"prompt": "x", "repetition_penalty": 0}, "repetition_penalty"),
    ({"prompt": "x", "min_tokens": 20, "max_tokens": 5}, "min_tokens"),
    ({"prompt": "x", "min_tokens": -1}, "min_tokens"),
    ({"prompt": "x", "stop_token_ids": ["a"]}, "stop_token_ids"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": "x", "stream": True, "stream_options": {"include_usage": 1}},
     "stream_options.include_usage"),
    ({"prompt": "x", "stop": [""]}, "stop"),
    ({"prompt": "x", "min_loops": 5}, "min_loops"),
    ({"prompt": "x", "max_loops": 9}, "max_loops"),
    ({"prompt": "x", "min_loops": 3, "max_loops": 2}, "max_loops"),
    ({"prompt": "x", "exit_threshold": -0.5}, "exit_threshold"),
    ({"prompt": [1] * 1030}, "prompt"),  # beyond the tiny model's 1024 positions
    ({"prompt": [1] * 10, "max_tokens": 1020}, "max_tokens"),
    ({}, "prompt"),
]


@pytest.mark.parametrize(("body", "param"), BAD, ids=[f"{p}-{i}" for i, (_, p) in enumerate(BAD)])
def test_bad_request_is_a_400_naming_the_field(srv: Running, body: dict, param: str) -> None:
    r = httpx2.post(srv.url + "/v1/completions", json=body, timeout=10)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert err["message"].startswith(param + ":"), err["message"]


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize(("raw", "param"), [
    (b"{bad", None), (b"[1, 2]", None), (b"\xff\xfe", None), (b"", None),
    (b"[" * 100_000 + b"]" * 100_000, None),  # deeper than the JSON parser recurses
    (b'{"prompt": "\\ud800", "messages": [{"role": "user", "content": "\\ud800"}]}',
     "prompt|messages"),  # a lone surrogate: valid JSON, not encodable text
    (b'{"prompt": "x", "messages": "hi", "max_tokens": 1e400}', "max_tokens|messages"),
])
def test_malformed_body_is_a_400(srv: Running, raw: bytes, param: str | None,
                                 route: str) -> None:
    with server_log() as records:
        r = httpx2.post(srv.url + route, content=raw, timeout=10)
    assert r.status_code == 400, r.text
    got = r.json()["error"]["param"]
    assert got == param if param is None else got in param.split("|")
    assert not [rec for rec in records if rec.exc_info], "a client's mistake logged a traceback"


def test_prompt_longer_than_the_cache_is_a_400(small: Running) -> None:
    r = httpx2.post(small.url + "/v1/completions", json={"prompt": [1] * 300}, timeout=10)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "prompt" and "KV blocks" in err["message"]


def test_unknown_model_is_openai_404(srv: Running) -> None:
    r = httpx2.post(srv.url + "/v1/completions", json={"prompt": "x", "model": "gpt-9"},
                    timeout=10)
    assert r.status_code == 404
    assert r.json()["error"] == {
        "message": "model: 'gpt-9' is not served here; use 'tiny'",
        "type": "invalid_request_error", "param": "model", "code": "model_not_found"}


def test_models_health_and_metrics_names(srv: Running) -> None:
    models = _client(srv).models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert httpx2.get(srv.url + "/health", timeout=10).status_code == 200
    text = httpx2.get(srv.url + "/metrics", timeout=10).text
    for name in ("time_to_first_token_seconds_bucket", "inter_token_latency_seconds_bucket",
                 "e2e_request_latency_seconds_bucket", "num_requests_running",
                 "num_requests_waiting", "kv_cache_usage_perc", "kv_blocks_in_use",
                 "core_calls_total", "mixed_core_calls_total", "prompt_tokens_total",
                 "generation_tokens_total", "request_success_total"):
        assert f'loopserve:{name}{{' in text, name
    assert "loopserve:prefix_cache_queries_total{" in text
    assert "loopserve:prefix_cache_hits_total{" in text


def test_prefix_caching_server_reuses_a_prompt_and_counts_hits() -> None:
    prompt = [(7 * i) % 63 + 1 for i in range(40)]  # 2 full 16-token blocks
    want = LLM("tiny", arm="mixed", seed=0).generate(
        [prompt], SamplingParams(max_tokens=6))[0].output_token_ids
    with running_server(enable_prefix_caching=True) as running:
        client = _client(running)
        for _ in range(2):
            out = client.completions.create(model="tiny", prompt=prompt, max_tokens=6,
                                            temperature=0.0)
            assert _ids(out.choices[0].text) == want
        running.wait_metric("loopserve:prefix_cache_queries_total", 80.0)
        assert running.metric("loopserve:prefix_cache_hits_total") == 32.0
