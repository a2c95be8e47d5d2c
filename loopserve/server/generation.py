"""One accepted request on the asyncio side, from submission to its last byte.

A request with P prompts and ``n`` samples is P * n engine requests, choice ``p * n + i``
being sample ``i`` of prompt ``p`` (vLLM's order); they share one queue, which the engine
thread fills after each step. The response ends when every choice has a finish reason, or
at the first failure. Whatever has not finished when the response ends (the client left, a
failure) is aborted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.core.request import SamplingParams, TokenLogprobs
from engine.output_processor import Delta
from engine.parallel_sampling import sample_params
from loopserve.server.responses import DONE, Shapes, error_event, usage
from loopserve.server.submission import Failure, Item, Submission

if TYPE_CHECKING:
    from fastapi import Request
    from fastapi.responses import Response

    from loopserve.server.service import Service

GONE = Failure("client disconnected")


@dataclass
class _Choice:
    pieces: list[str] = field(default_factory=list)
    num_tokens: int = 0
    finish_reason: str | None = None
    logprobs: list[tuple[TokenLogprobs, int]] | None = None


class Generation:
    """The choices of one response and the engine requests behind them."""

    def __init__(self, service: Service, shapes: Shapes, prompts: list[list[int]],
                 params: list[SamplingParams], include_usage: bool) -> None:
        self.service, self.shapes, self.include_usage = service, shapes, include_usage
        self.prompt_tokens = sum(len(p) for p in prompts)
        self.queue: asyncio.Queue[list[Item]] = asyncio.Queue()
        self.submissions: list[Submission] = []
        now = time.perf_counter()
        for p, (ids, sp) in enumerate(zip(prompts, params, strict=True)):
            for i in range(sp.n):
                rid = shapes.rid if len(prompts) * sp.n == 1 else f"{shapes.rid}-{p * sp.n + i}"
                group = self.submissions[p * sp.n].request_id if i else rid
                self.submissions.append(Submission(
                    rid, ids, sample_params(sp, i), now, self.queue, group if i else None,
                    group if sp.n > 1 else None))
        self.index = {s.request_id: k for k, s in enumerate(self.submissions)}
        logprobs = [s.params.logprobs is not None for s in self.submissions]
        self.choices = [_Choice(logprobs=[] if lp else None) for lp in logprobs]
        self.failure: str | None = None
        self._closed = False

    def submit(self) -> None:
        self.service.in_flight += 1
        for sub in self.submissions:
            self.service.engine.submit(sub)

    def _take(self, items: list[Item]) -> list[
            tuple[int, str, str | None, list[tuple[TokenLogprobs, int]] | None]]:
        """(choice, text, finish_reason, logprobs) per token; sets finish reasons or failure."""
        out = []
        for it in items:
            if isinstance(it, Failure):
                self.failure = it.message
                break
            assert isinstance(it, Delta)
            k = self.index[it.event.request_id]
            choice = self.choices[k]
            if choice.finish_reason is not None:
                continue
            choice.num_tokens += 1
            choice.pieces.append(it.text)
            entry = None
            if choice.logprobs is not None and it.event.logprobs is not None:
                entry = [(it.event.logprobs, it.text_offset)]
                choice.logprobs += entry
            if it.finished:
                choice.finish_reason = it.finish_reason
            out.append((k, it.text, choice.finish_reason, entry))
        return out

    @property
    def done(self) -> bool:
        return self.failure is not None or all(c.finish_reason is not None for c in self.choices)

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self.service.in_flight -= 1
            for sub, choice in zip(self.submissions, self.choices, strict=True):
                if choice.finish_reason is None:  # gone, cancelled or failed: idempotent
                    self.service.engine.abort(sub.request_id)

    def _usage(self) -> dict[str, int]:
        return usage(self.prompt_tokens, sum(c.num_tokens for c in self.choices))

    async def events(self) -> AsyncIterator[bytes]:
        shapes = self.shapes
        try:
            if shapes.chat:
                for k in range(len(self.choices)):
                    yield shapes.role_chunk(k)
            while not self.done:
                for k, text, reason, entries in self._take(await self.queue.get()):
                    yield shapes.chunk(k, text, reason, entries)
            if self.failure is not None:
                yield error_event(self.failure)
            elif self.include_usage:
                yield shapes.usage_chunk(self._usage())
            yield DONE
        finally:
            self._close()

    async def collect(self, request: Request) -> Response:
        from fastapi.responses import JSONResponse

        from loopserve.server.protocol import RequestError

        watcher = asyncio.ensure_future(self._watch(request))
        try:
            while not self.done:
                self._take(await self.queue.get())
        finally:
            watcher.cancel()
            self._close()
        if self.failure is not None:
            status = 499 if self.failure == GONE.message else 500
            err = RequestError(self.failure, None, status, "engine_error", "server_error")
            return JSONResponse(err.body(), status_code=status)
        return JSONResponse(self.shapes.body(
            [("".join(c.pieces), c.finish_reason, c.logprobs) for c in self.choices],
            self._usage()))

    async def _watch(self, request: Request) -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        self.queue.put_nowait([GONE])
