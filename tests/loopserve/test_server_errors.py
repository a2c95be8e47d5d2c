"""Errors in OpenAI's shape everywhere (unknown routes and methods), ``--api-key``, and the
serve flags that must fail with one line before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from openai import AuthenticationError, OpenAI

from tests.reference import fixtures  # noqa: F401 - one torch thread, as the other engine tests
from tests.server_helpers import running_server, server_log

KEY = "sk-loopserve-test-7f3a"


def _shape(r: httpx2.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and "detail" not in body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_unknown_route_and_method_answer_openai_errors() -> None:
    with running_server() as srv:
        err = _shape(httpx2.get(srv.url + "/v1/nothing", timeout=10), 404)
        assert err["message"] == "GET /v1/nothing: no such route"
        err = _shape(httpx2.get(srv.url + "/v1/chat/completions", timeout=10), 405)
        assert err["code"] == "method_not_allowed"
        _shape(httpx2.delete(srv.url + "/v1/completions", timeout=10), 405)
        _shape(httpx2.post(srv.url + "/v1/models", timeout=10), 405)
        _shape(httpx2.get(srv.url + "/docs", timeout=10), 404)


def test_api_key_guards_v1_only_and_never_leaks() -> None:
    with server_log() as records, running_server(api_key=KEY) as srv:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY},
                        {"Authorization": f"Basic {KEY}"}):
            for method, path in (("GET", "/v1/models"), ("POST", "/v1/completions"),
                                 ("POST", "/v1/chat/completions"), ("GET", "/v1/nothing")):
                r = httpx2.request(method, srv.url + path, headers=headers, timeout=10,
                                   json={"prompt": "x", "max_tokens": 2})
                err = _shape(r, 401)
                assert err["code"] == "invalid_api_key" and KEY not in r.text
        assert httpx2.get(srv.url + "/health", timeout=10).status_code == 200
        assert httpx2.get(srv.url + "/metrics", timeout=10).status_code == 200
        good = OpenAI(base_url=srv.url + "/v1", api_key=KEY, max_retries=0, timeout=30)
        assert [m.id for m in good.models.list().data] == ["tiny"]
        out = good.completions.create(model="tiny", prompt="hi", max_tokens=2)
        assert out.usage.completion_tokens == 2 and KEY not in out.model_dump_json()
        chat = good.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        assert chat.usage.completion_tokens == 2
        with pytest.raises(AuthenticationError):
            OpenAI(base_url=srv.url + "/v1", api_key="nope", max_retries=0).models.list()
        assert KEY not in repr(srv.service)
    assert not any(KEY in r.getMessage() for r in records)


E2E_CPU = str(Path(__file__).resolve().parents[2] / "scenarios" / "e2e-cpu.yaml")


def _serve(*flags: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loopserve", "serve", "--model", "tiny",
                           *flags], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize(("flags", "field"), [
    (("--port", "99999"), "--port"),
    (("--port", "65536"), "--port"),
    (("--port", "-1"), "--port"),
    (("--host", "no-such-host.invalid"), "--host"),
    (("--host", "10.254.254.254"), "--host"),  # resolves, but is not this machine's
    (("--chat-template", "/nonexistent/t.jinja"), "--chat-template"),
    (("--api-key", " "), "--api-key"),
    # the scenario configures the engine: a flag that would be ignored is refused
    (("--scenario", E2E_CPU, "--max-num-seqs", "4"), "--max-num-seqs"),
    (("--scenario", E2E_CPU, "--num-blocks", "64"), "--num-blocks"),
])
def test_bad_serve_flags_fail_with_one_line(flags: tuple[str, ...], field: str) -> None:
    r = _serve(*flags)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"loopserve: error: {field}:"), r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_cuda_without_a_gpu_is_one_line() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --device cuda is valid here")
    r = _serve("--device", "cuda")
    assert r.returncode == 2
    assert r.stderr.strip() == ("loopserve: error: --device: cuda: no CUDA device on this "
                                "machine; use --device cpu")
