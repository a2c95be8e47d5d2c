"""The FastAPI app: ``POST /v1/completions``, ``GET /v1/models``, ``/health``, ``/metrics``.

A request is validated on the asyncio side (``protocol``), then handed to the engine thread
with its own ``asyncio.Queue``; the engine thread fills that queue after each step. One SSE
event goes out per token, in the chunk format OpenAI and vLLM emit, the last carrying the
finish reason, then the usage chunk when ``stream_options.include_usage`` asks for it, then
``data: [DONE]``. A client that goes away has its request aborted: Starlette cancels a
stream when the client disconnects, and a watcher does the same for a non-streamed request.
``max_waiting`` bounds the accepted requests not yet running; past it the answer is 503 with
``Retry-After``. Accepted requests are never dropped.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.text_stream import TextStream
from loopserve.server import protocol as P
from loopserve.server.engine_thread import EngineThread, Failure, Item, Submission
from loopserve.server.metrics import CONTENT_TYPE, ServerMetrics
from loopserve.server.tokenizer import Tokenizer

_GONE = Failure("client disconnected")
RETRY_AFTER_S = 1


@dataclass
class Service:
    """Everything the handlers share. ``in_flight`` counts accepted requests whose response
    is not done; the overload bound reads the engine's own waiting count instead, which
    does not depend on a response ever being started."""

    engine: EngineThread
    tokenizer: Tokenizer
    limits: P.Limits
    metrics: ServerMetrics
    max_waiting: int
    in_flight: int = 0
    draining: bool = False
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def num_waiting(self) -> int:
        return self.engine.num_waiting


def _error(err: P.RequestError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def _unavailable(message: str, code: str) -> JSONResponse:
    return _error(P.RequestError(message, None, 503, code, "server_error"),
                  {"Retry-After": str(RETRY_AFTER_S)})


def build_app(service: Service) -> FastAPI:
    """The app over a not yet started engine thread (the lifespan starts and stops it)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.engine.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            service.draining = True
            await asyncio.to_thread(service.engine.stop)

    app = FastAPI(title="loopserve", lifespan=lifespan)
    name = service.limits.model_name

    @app.get("/health")
    async def health() -> Response:
        ok = service.engine.alive and not service.draining
        return Response(status_code=200 if ok else 503)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model",
                                             "created": service.created,
                                             "owned_by": "loopserve"}]}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(service.metrics.render(), media_type=CONTENT_TYPE)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        if service.draining:
            return _unavailable("the server is shutting down; retry on another replica",
                                "shutting_down")
        try:
            req = P.parse_request(await request.body())
            if req.model is not None and req.model != name:
                raise P.RequestError(f"model: {req.model!r} is not served here; use {name!r}",
                                     "model", 404, "model_not_found")
            ids = P.resolve_prompt(req.prompt, service.tokenizer,
                                   service.limits.cfg.model.vocab_size)
            params = P.sampling_params(req, len(ids), service.limits, service.tokenizer)
            stops = P.stop_strings(req)
        except P.RequestError as err:
            return _error(err)
        if service.num_waiting >= service.max_waiting:
            return _unavailable(f"overloaded: {service.num_waiting} requests are waiting "
                                f"(max_waiting {service.max_waiting}); retry later",
                                "overloaded")
        gen = _Generation(service, f"cmpl-{uuid.uuid4().hex}", len(ids),
                          TextStream(service.tokenizer.decoder(), stops), req.include_usage)
        service.in_flight += 1
        service.engine.submit(Submission(gen.rid, ids, params, time.perf_counter(), gen.queue))
        if req.stream:
            return StreamingResponse(gen.events(), media_type="text/event-stream")
        return await gen.collect(request)

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        return _error(P.RequestError(f"internal error: {type(exc).__name__}: {exc}", None, 500,
                                     None, "server_error"))

    return app


class _Generation:
    """One accepted request on the asyncio side, from submission to its last byte."""

    def __init__(self, service: Service, rid: str, prompt_len: int, text: TextStream,
                 include_usage: bool) -> None:
        self.service, self.rid, self.prompt_len = service, rid, prompt_len
        self.text, self.include_usage = text, include_usage
        self.queue: asyncio.Queue[list[Item]] = asyncio.Queue()
        self.num_tokens = 0
        self.finish_reason: str | None = None
        self.failure: str | None = None
        self._closed = False

    def _take(self, items: list[Item]) -> list[tuple[str, str | None]]:
        """(text, finish_reason) per token of ``items``; sets finish_reason or failure."""
        out = []
        for it in items:
            if isinstance(it, Failure):
                self.failure = it.message
                break
            self.num_tokens += 1
            piece, stopped = self.text.add(it.token_id)
            if stopped:
                self.finish_reason = "stop"
                if not it.finished:
                    self.service.engine.abort(self.rid)
            elif it.finished:
                self.finish_reason = it.finish_reason
                piece += self.text.flush()
            out.append((piece, self.finish_reason))
            if self.finish_reason is not None:
                break
        return out

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.failure is not None

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self.service.in_flight -= 1
            if self.finish_reason is None:  # gone, cancelled or failed: abort is idempotent
                self.service.engine.abort(self.rid)

    async def events(self) -> AsyncIterator[bytes]:
        name, created = self.service.limits.model_name, int(time.time())
        try:
            while not self.done:
                for piece, reason in self._take(await self.queue.get()):
                    yield P.chunk(self.rid, created, name, piece, reason)
            if self.failure is not None:
                yield P.error_event(self.failure)
            elif self.include_usage:
                yield P.usage_chunk(self.rid, created, name,
                                    P.usage(self.prompt_len, self.num_tokens))
            yield P.DONE
        finally:
            self._close()

    async def collect(self, request: Request) -> Response:
        watcher = asyncio.ensure_future(self._watch(request))
        try:
            pieces: list[str] = []
            while not self.done:
                pieces.extend(p for p, _ in self._take(await self.queue.get()))
        finally:
            watcher.cancel()
            self._close()
        if self.failure is not None:
            status = 499 if self.failure == _GONE.message else 500
            return _error(P.RequestError(self.failure, None, status, "engine_error",
                                         "server_error"))
        return JSONResponse(P.completion(
            self.rid, int(time.time()), self.service.limits.model_name, "".join(pieces),
            self.finish_reason, P.usage(self.prompt_len, self.num_tokens)))

    async def _watch(self, request: Request) -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        self.queue.put_nowait([_GONE])
