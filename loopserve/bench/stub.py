"""A stub OpenAI completions server that answers at once (no model): ``max_tokens`` content
chunks, the usage chunk, ``[DONE]``. It measures the benchmark client, not an engine.

    python -m loopserve.bench.stub [--port 0]     # prints "stub: http://127.0.0.1:PORT"
"""

from __future__ import annotations

import argparse
import asyncio
import json

from aiohttp import web


def _chunk(body: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


async def completions(request: web.Request) -> web.StreamResponse:
    req = await request.json()
    n = int(req.get("max_tokens") or 16)
    head = {"id": "cmpl-stub", "object": "text_completion", "created": 0, "model": "stub"}
    parts = [_chunk({**head, "choices": [{"index": 0, "text": "x", "logprobs": None,
                                          "finish_reason": None if i < n - 1 else "length"}]})
             for i in range(n)]
    parts.append(_chunk({**head, "choices": [], "usage": {
        "prompt_tokens": 1, "completion_tokens": n, "total_tokens": 1 + n}}))
    parts.append(b"data: [DONE]\n\n")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for part in parts:
        await resp.write(part)
    await resp.write_eof()
    return resp


async def models(_: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model"}]})


async def serve(host: str, port: int) -> None:
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
    print(f"stub: http://{bound[0]}:{bound[1]}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m loopserve.bench.stub")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    try:
        import uvloop

        uvloop.run(serve(a.host, a.port))
    except KeyboardInterrupt:
        pass
