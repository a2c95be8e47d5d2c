"""A stub OpenAI server that answers at once (no model): ``/v1/completions`` and
``/v1/chat/completions`` stream ``max_tokens`` (``max_completion_tokens``) token chunks, the
last with finish reason ``length``, then the usage chunk and ``[DONE]``; a chat stream opens
with the role chunk. It measures the benchmark client, not an engine, and misbehaves on
request (``Stub.fault``) so the client's guards can be tested:

- ``malformed``: the second event is not JSON; ``not-object``: it is the JSON ``5``;
- ``cut``: the stream ends after the tokens, with no finish reason and no ``[DONE]``;
- ``hang``: every request is accepted and never answered;
- ``models-empty`` / ``models-html``: ``/v1/models`` answers an empty / an HTML body.

``slow_first`` requests (in arrival order) wait ``slow_s`` before their first chunk, and
``itl_s`` separates chunks. Every request is recorded (arrival time, path, body).

    python -m loopserve.bench.stub [--port 0] [--fault NAME]   # "stub: http://127.0.0.1:PORT"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

FAULTS = ("malformed", "not-object", "cut", "hang", "models-empty", "models-html")


@dataclass
class Stub:
    """The stub's behaviour and what it received."""

    fault: str | None = None
    slow_first: int = 0
    slow_s: float = 0.0
    itl_s: float = 0.0
    received: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)


def _event(body: Any) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def _events(chat: bool, n: int, fault: str | None) -> list[bytes]:
    kind = "chat.completion.chunk" if chat else "text_completion"
    head = {"id": "stub", "object": kind, "created": 0, "model": "stub"}

    def choice(i: int) -> dict[str, Any]:
        reason = "length" if i == n - 1 and fault != "cut" else None
        if chat:
            return {"index": 0, "delta": {"content": "x"}, "finish_reason": reason}
        return {"index": 0, "text": "x", "logprobs": None, "finish_reason": reason}

    parts = [_event({**head, "choices": [choice(i)]}) for i in range(n)]
    if chat:
        parts.insert(0, _event({**head, "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}))
    if fault in ("malformed", "not-object"):
        parts.insert(1, b"data: {\"choices\": [\n\n" if fault == "malformed" else b"data: 5\n\n")
    if fault == "cut":
        return parts
    parts.append(_event({**head, "choices": [], "usage": {
        "prompt_tokens": 1, "completion_tokens": n, "total_tokens": 1 + n}}))
    parts.append(b"data: [DONE]\n\n")
    return parts


def make_app(stub: Stub) -> web.Application:
    """The stub's aiohttp application."""

    async def generate(request: web.Request) -> web.StreamResponse:
        req = await request.json()
        stub.received.append((time.perf_counter(), request.path, req))
        slow = len(stub.received) <= stub.slow_first
        if stub.fault == "hang":
            await asyncio.Event().wait()
        chat = request.path.endswith("chat/completions")
        n = int(req.get("max_completion_tokens" if chat else "max_tokens") or 16)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if slow:
            await asyncio.sleep(stub.slow_s)
        for i, part in enumerate(_events(chat, n, stub.fault)):
            if i and stub.itl_s:
                await asyncio.sleep(stub.itl_s)
            await resp.write(part)
        await resp.write_eof()
        return resp

    async def models(_: web.Request) -> web.Response:
        if stub.fault == "models-empty":
            return web.Response(body=b"")
        if stub.fault == "models-html":
            return web.Response(text="<html>hello</html>", content_type="text/html")
        return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/chat/completions", generate)
    app.router.add_get("/v1/models", models)
    return app


async def _start(stub: Stub, host: str, port: int) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(make_app(stub), access_log=None, handler_cancellation=True,
                           shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
    return runner, f"http://{bound[0]}:{bound[1]}"


@contextmanager
def running_stub(stub: Stub, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``stub`` on a free port from a background thread; yields its URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner, url = asyncio.run_coroutine_threadsafe(_start(stub, host, 0), loop).result(30)
    try:
        yield url
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


async def serve(stub: Stub, host: str, port: int) -> None:
    runner, url = await _start(stub, host, port)
    print(f"stub: {url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m loopserve.bench.stub")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--fault", choices=FAULTS)
    a = p.parse_args()
    try:
        import uvloop

        uvloop.run(serve(Stub(fault=a.fault), a.host, a.port))
    except KeyboardInterrupt:
        pass
