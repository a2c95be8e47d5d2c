"""The async HTTP client of ``loopserve bench serve`` (aiohttp), timed as vLLM's.

Each request is one streamed ``POST`` to the backend's endpoint (``openai``:
``/v1/completions`` with ``prompt`` and ``max_tokens``; ``openai-chat``:
``/v1/chat/completions`` with one user message and ``max_completion_tokens``), with
``stream_options.include_usage``; its clock starts just before the request is sent and the
response is read by ``loopserve.bench.stream``. A request fails, without stopping the
benchmark, on a non-200 status, a transport error, a timeout or a failed stream. Requests
leave at their scheduled offsets from the start, at most ``max_concurrency`` in flight when
given; with several base URLs request ``i`` goes to URL ``i mod N`` (round-robin).

Warm-ups (``num_warmups``, vLLM's ``--num-warmups``): that many copies of the first request,
round-robin over the URLs, sent under the same concurrency limit and awaited before the
clock starts; they appear in no outcome and no metric.

Every network wait is bounded (``Timeouts``): a TCP connect by ``connect_s``, and each read
(the status line, the first token, every later chunk) by ``read_s``; a server that accepts
and never answers fails the request after ``read_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from tqdm import tqdm

from loopserve.bench.datasets import SampleRequest
from loopserve.bench.stream import BACKENDS, read_stream
from loopserve.outputs.vllm_results import RequestOutcome

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_READ_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class Timeouts:
    """The bound of each network wait, in seconds."""

    connect_s: float = DEFAULT_CONNECT_TIMEOUT_S
    read_s: float = DEFAULT_READ_TIMEOUT_S

    def client_timeout(self) -> aiohttp.ClientTimeout:
        # no total: a long generation is fine as long as its chunks keep coming
        return aiohttp.ClientTimeout(total=None, sock_connect=self.connect_s,
                                     sock_read=self.read_s)


def payload(backend: str, model: str, req: SampleRequest, *, ignore_eos: bool,
            temperature: float, extra_body: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON body of one request (module docstring); a chat prompt must be text."""
    body: dict[str, Any] = {"model": model, "temperature": temperature, "stream": True,
                            "stream_options": {"include_usage": True}}
    if backend == "openai-chat":
        body["messages"] = [{"role": "user", "content": req.prompt}]
        body["max_completion_tokens"] = req.output_len
    else:
        body["prompt"] = req.prompt
        body["max_tokens"] = req.output_len
    if ignore_eos:
        body["ignore_eos"] = True
    return {**body, **(extra_body or {})}


async def _one(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
               req: SampleRequest, t0: float, backend: str,
               timeouts: Timeouts) -> RequestOutcome:
    out = RequestOutcome(prompt_len=req.prompt_len)
    st = time.perf_counter()
    out.start_s = st - t0
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                out.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return out
            out.generated_text = await read_stream(resp, out, url, backend, st)
    except (TimeoutError, aiohttp.ServerTimeoutError) as err:
        kind = "connect" if isinstance(err, aiohttp.ConnectionTimeoutError) else "read"
        limit = timeouts.connect_s if kind == "connect" else timeouts.read_s
        out.error = f"{url}: no answer within {limit:g} s (--{kind}-timeout)"
    except (aiohttp.ClientError, ValueError) as err:
        out.error = f"{url}: {type(err).__name__}: {err}"
    out.success = not out.error
    if out.success and not out.output_tokens:
        out.output_tokens = 1 + len(out.itl)  # no usage chunk: one token chunk per token
    return out


async def run(base_url: str | Sequence[str], model: str, requests: Sequence[SampleRequest],
              offsets: Sequence[float], *, max_concurrency: int | None = None,
              ignore_eos: bool = False, temperature: float = 0.0,
              extra_body: dict[str, Any] | None = None, progress: bool = True,
              backend: str = "openai", num_warmups: int = 0,
              timeouts: Timeouts = Timeouts()) -> tuple[list[RequestOutcome], float]:
    """Send the warm-ups, then every request at its offset; the outcomes in request order,
    and the duration from the start to the last request's end (warm-ups excluded)."""
    bases = [base_url] if isinstance(base_url, str) else list(base_url)
    urls = [b.rstrip("/") + BACKENDS[backend] for b in bases]
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    connector = aiohttp.TCPConnector(limit=max_concurrency or 0, keepalive_timeout=60)

    def body(req: SampleRequest) -> dict[str, Any]:
        return payload(backend, model, req, ignore_eos=ignore_eos, temperature=temperature,
                       extra_body=extra_body)

    async def send(i: int, req: SampleRequest, t0: float) -> RequestOutcome:
        async with limit if limit is not None else contextlib.nullcontext():
            return await _one(session, urls[i % len(urls)], body(req), req, t0, backend,
                              timeouts)

    async def scheduled(i: int, req: SampleRequest) -> RequestOutcome:
        delay = offsets[i] - (time.perf_counter() - t0)
        if delay > 0:
            await asyncio.sleep(delay)
        outcome = await send(i, req, t0)
        bar.update(1)
        return outcome

    async with aiohttp.ClientSession(connector=connector,
                                     timeout=timeouts.client_timeout()) as session:
        if num_warmups and requests:
            now = time.perf_counter()
            await asyncio.gather(*(send(i, requests[0], now) for i in range(num_warmups)))
        bar = tqdm(total=len(requests), unit="req", file=sys.stderr, disable=not progress,
                   leave=False)
        t0 = time.perf_counter()
        try:
            outcomes = await asyncio.gather(*(scheduled(i, r) for i, r in enumerate(requests)))
        finally:
            bar.close()
        duration = time.perf_counter() - t0
    return list(outcomes), duration
