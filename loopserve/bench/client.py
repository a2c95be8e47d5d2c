"""The async HTTP client of ``loopserve bench serve`` (aiohttp), timed as vLLM's.

Each request is one streamed ``POST /v1/completions`` with ``stream_options.include_usage``;
its clock starts just before the request is sent. A chunk with ``choices`` is a content
chunk (the first sets TTFT, each later one adds an ITL gap, even when its text is empty); the
usage chunk gives the output token count. A request fails, without stopping the benchmark,
on a non-200 status, an in-stream error event, a transport error, or a stream that ends
without a content chunk. Requests leave at their scheduled offsets from the start, at most
``max_concurrency`` in flight when given.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
from tqdm import tqdm

from loopserve.bench.datasets import SampleRequest
from loopserve.outputs.vllm_results import RequestOutcome

TIMEOUT_S = 6 * 3600


async def _one(session: aiohttp.ClientSession, url: str, payload: dict[str, Any],
               req: SampleRequest, t0: float) -> RequestOutcome:
    out = RequestOutcome(prompt_len=req.prompt_len)
    text: list[str] = []
    st = time.perf_counter()
    out.start_s = st - t0
    last = st
    first = True
    try:
        async with session.post(url, json=payload) as resp:
            if resp.status != 200:
                out.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return out
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                if choices := chunk.get("choices"):
                    now = time.perf_counter()
                    if first:
                        out.ttft, first = now - st, False
                    else:
                        out.itl.append(now - last)
                    last = now
                    text.append(choices[0].get("text") or "")
                elif usage := chunk.get("usage"):
                    out.output_tokens = int(usage.get("completion_tokens") or 0)
                elif err := chunk.get("error"):
                    out.error = str(err.get("message", err))
    except (TimeoutError, aiohttp.ClientError, ValueError) as err:
        out.error = f"{type(err).__name__}: {err}"
    out.generated_text = "".join(text)
    if not out.error and first:
        out.error = "the stream ended without a content chunk"
    out.success = not out.error
    out.latency = last - st
    if out.success and not out.output_tokens:
        out.output_tokens = 1 + len(out.itl)  # no usage chunk: one content chunk per token
    return out


async def run(base_url: str, model: str, requests: Sequence[SampleRequest],
              offsets: Sequence[float], *, max_concurrency: int | None = None,
              ignore_eos: bool = False, temperature: float = 0.0,
              extra_body: dict[str, Any] | None = None,
              progress: bool = True) -> tuple[list[RequestOutcome], float]:
    """Send every request at its offset; the outcomes in request order, and the duration
    from the start to the last request's end."""
    url = base_url.rstrip("/") + "/v1/completions"
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    connector = aiohttp.TCPConnector(limit=max_concurrency or 0, keepalive_timeout=60)
    bar = tqdm(total=len(requests), unit="req", file=sys.stderr, disable=not progress,
               leave=False)

    async def scheduled(i: int, req: SampleRequest) -> RequestOutcome:
        payload = {"model": model, "prompt": req.prompt, "max_tokens": req.output_len,
                   "temperature": temperature, "stream": True,
                   "stream_options": {"include_usage": True}, **(extra_body or {})}
        if ignore_eos:
            payload["ignore_eos"] = True
        delay = offsets[i] - (time.perf_counter() - t0)
        if delay > 0:
            await asyncio.sleep(delay)
        async with limit if limit is not None else contextlib.nullcontext():
            outcome = await _one(session, url, payload, req, t0)
        bar.update(1)
        return outcome

    async with aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session:
        t0 = time.perf_counter()
        try:
            outcomes = await asyncio.gather(*(scheduled(i, r) for i, r in enumerate(requests)))
        finally:
            bar.close()
        duration = time.perf_counter() - t0
    return list(outcomes), duration


async def served_model(base_url: str) -> str:
    """The first model id of ``GET /v1/models``."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        async with session.get(base_url.rstrip("/") + "/v1/models") as resp:
            resp.raise_for_status()
            body = await resp.json()
    return str(body["data"][0]["id"])
