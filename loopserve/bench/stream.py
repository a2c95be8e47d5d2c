"""One streamed response read as ``vllm bench serve`` times it, for both backends.

Events are Server-Sent Events lines: ``data: {json}``, ``data: [DONE]``; comments (``:``)
and other fields are skipped. A *token chunk* sets TTFT (the first) or adds an ITL gap:

- ``openai`` (``/v1/completions``): any chunk with ``choices``, even when its text is empty
  (vLLM's rule: a special token has no text);
- ``openai-chat`` (``/v1/chat/completions``): a chunk whose ``delta`` carries ``content`` or
  ``reasoning_content``, except the role announcement (``role`` with empty content) and a
  content-less finish chunk, which carry no token (vLLM counts those too, adding a near-zero
  gap to ITL).

The usage chunk gives the output token count. The stream fails on an error event, a
malformed event (not JSON, not an object, a ``choices`` that is not a list of objects), no
token chunk, or an end without a finish reason and without ``[DONE]`` (a cut stream); every
failure message names the URL.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp

from loopserve.outputs.vllm_results import RequestOutcome

BACKENDS = {"openai": "/v1/completions", "openai-chat": "/v1/chat/completions"}


class MalformedEvent(ValueError):
    """An SSE event the client cannot read."""


def _token_text(choice: dict[str, Any], chat: bool) -> str | None:
    """The text of a token chunk's choice, None when the chunk carries no token."""
    if not chat:
        text = choice.get("text")
        return text if isinstance(text, str) else ""
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        raise MalformedEvent("a chat chunk's choice has no delta object")
    for key in ("content", "reasoning_content"):
        text = delta.get(key)
        if isinstance(text, str) and (text or "role" not in delta):
            return text
    return None


async def read_stream(resp: aiohttp.ClientResponse, out: RequestOutcome, url: str,
                      backend: str, st: float) -> str:
    """Fill ``out``'s timing, text and token count from ``resp``'s events; the generated
    text. Sets ``out.error`` on a failed stream (module docstring)."""
    chat = backend == "openai-chat"
    text: list[str] = []
    last = st
    first = True
    done = finished = False
    async for raw in resp.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue  # blank separators, comments (":"), event / id fields
        data = line[5:].strip()
        if data == b"[DONE]":
            done = True
            break
        now = time.perf_counter()
        try:
            chunk = json.loads(data)
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict):
            out.error = f"{url}: malformed SSE event {data[:80]!r}"
            break
        if err := chunk.get("error"):
            out.error = f"{url}: error event: " + str(
                err.get("message", err) if isinstance(err, dict) else err)[:300]
            break
        choices = chunk.get("choices")
        usage = chunk.get("usage")
        if choices:
            if not isinstance(choices, list) or not isinstance(choices[0], dict):
                out.error = f"{url}: malformed SSE event: choices is not a list of objects"
                break
            try:
                piece = _token_text(choices[0], chat)
            except MalformedEvent as bad:
                out.error = f"{url}: malformed SSE event: {bad}"
                break
            finished = finished or bool(choices[0].get("finish_reason"))
            if piece is not None:
                if first:
                    out.ttft, first = now - st, False
                else:
                    out.itl.append(now - last)  # type: ignore[attr-defined]
                last = now
                text.append(piece)
        elif isinstance(usage, dict):
            tokens = usage.get("completion_tokens")
            if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
                out.error = f"{url}: malformed usage chunk: completion_tokens {tokens!r}"
                break
            out.output_tokens = tokens
    if not out.error and first:
        out.error = f"{url}: the stream ended without a token chunk"
    elif not out.error and not (done or finished):
        out.error = f"{url}: the stream ended without a finish reason or [DONE]"
    out.latency = last - st
    return "".join(text)
