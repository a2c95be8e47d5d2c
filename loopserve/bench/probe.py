"""Before a benchmark: each base URL is well formed and a server answers ``GET /v1/models``
there, within the client's timeouts. A URL nothing answers at, or one that is not
``http(s)://host[:port]``, is a one-line error naming ``--base-url`` and the URL, so a
benchmark never runs (and reports zero latencies) against nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import aiohttp
from yarl import URL

from loopserve.bench.client import Timeouts
from loopserve.errors import UserError


def base_urls(values: Sequence[str] | None) -> list[str]:
    """The ``--base-url`` values (repeated, or comma-separated) checked and without a
    trailing slash; default ``http://127.0.0.1:8000``."""
    out: list[str] = []
    for value in values or ["http://127.0.0.1:8000"]:
        for text in (part.strip() for part in value.split(",")):
            why = ""
            try:
                url: URL | None = URL(text)
            except (ValueError, TypeError) as err:  # a port outside 0-65535, say
                url, why = None, f" ({str(err)[:80]})"
            if url is None or url.scheme not in ("http", "https") or not url.host:
                raise UserError("--base-url", f"{text!r} is not an http(s) URL{why}; use e.g. "
                                "http://127.0.0.1:8000")
            if url.port == 0:
                raise UserError("--base-url", f"{text!r} has port 0; use 1-65535")
            if text.rstrip("/") in out:
                raise UserError("--base-url", f"{text} is given twice")
            out.append(text.rstrip("/"))
    return out


async def _models(session: aiohttp.ClientSession, base: str, timeouts: Timeouts,
                  need_id: bool) -> str | None:
    url = base + "/v1/models"
    try:
        async with session.get(url) as resp:
            status = resp.status
            raw = await resp.read()
    except (TimeoutError, aiohttp.ServerTimeoutError) as err:
        kind = "connect" if isinstance(err, aiohttp.ConnectionTimeoutError) else "read"
        limit = timeouts.connect_s if kind == "connect" else timeouts.read_s
        raise UserError("--base-url", f"{url} did not answer within {limit:g} s "
                        f"(--{kind}-timeout)") from None
    except aiohttp.ClientError as err:
        raise UserError("--base-url", f"nothing answers at {base} ({type(err).__name__}: "
                        f"{str(err)[:120]})") from None
    if not need_id:
        return None
    if status != 200:
        raise UserError("--base-url", f"{url} answered HTTP {status}; name the model with "
                        "--model")
    try:
        first = json.loads(raw)["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        first = None
    if not isinstance(first, str) or not first:
        raise UserError("--base-url", f"{url} answered no model id ({len(raw)} bytes, not "
                        "OpenAI's list of models); name the model with --model")
    return first


async def probe(bases: Sequence[str], timeouts: Timeouts, need_id: bool) -> str | None:
    """Ask every base URL for its models; the first URL's first model id when ``need_id``
    (no ``--model`` given). UserError naming ``--base-url`` on any failure."""
    async with aiohttp.ClientSession(timeout=timeouts.client_timeout()) as session:
        ids = await asyncio.gather(*(_models(session, b, timeouts, need_id and i == 0)
                                     for i, b in enumerate(bases)))
    return ids[0]
