"""The FastAPI app: ``POST /v1/completions``, ``POST /v1/chat/completions``,
``GET /v1/models``, ``/health``, ``/metrics``.

A request is validated on the asyncio side (``protocol``, ``params``), then handed to the
engine thread as one submission per (prompt, sample) sharing one ``asyncio.Queue``
(``generation``). One SSE event goes out per token and choice, in the chunk format OpenAI
and vLLM emit, the last of a choice carrying its finish reason, then the usage chunk when
``stream_options.include_usage`` asks for it, then ``data: [DONE]``. A client that goes away
has its requests aborted. ``max_waiting`` bounds the accepted requests not yet running;
past it the answer is 503 with ``Retry-After``. Accepted requests are never dropped.

Every error is in OpenAI's shape, unknown routes (404) and methods (405) included. With an
API key every ``/v1/*`` request needs ``Authorization: Bearer KEY`` (else 401); ``/health``
and ``/metrics`` stay open. The key is compared in constant time and never echoed.
"""

from __future__ import annotations

import asyncio
import hmac
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from loopserve.server.generation import Generation
from loopserve.server.metrics import CONTENT_TYPE
from loopserve.server.params import chat_prompt, resolve_prompts, sampling_params
from loopserve.server.protocol import ChatRequest, RequestError, error_body, parse_request
from loopserve.server.responses import Shapes
from loopserve.server.service import Service

RETRY_AFTER_S = 1


def _error(err: RequestError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def _unavailable(message: str, code: str) -> JSONResponse:
    return _error(RequestError(message, None, 503, code, "server_error"),
                  {"Retry-After": str(RETRY_AFTER_S)})


class ApiKeyCheck:
    """Pure ASGI middleware (Starlette's ``BaseHTTPMiddleware`` would delay a streaming
    response's disconnect, and so its abort): 401 for a ``/v1/*`` request without the key."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app, self.service = app, service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = self.service.api_key
        if key is not None and scope["type"] == "http" and scope["path"].startswith("/v1"):
            given = Headers(scope=scope).get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
                await _error(RequestError(
                    "invalid or missing API key: send the header 'Authorization: Bearer "
                    "<key>'", None, 401, "invalid_api_key"))(scope, receive, send)
                return
        await self.app(scope, receive, send)


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

    app = FastAPI(title="loopserve", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    name = service.limits.model_name

    app.add_middleware(ApiKeyCheck, service=service)

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
        return await _generate(service, request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _generate(service, request, chat=True)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = (f"{request.method} {request.url.path}: "
                   f"{'no such route' if exc.status_code == 404 else exc.detail}")
        return JSONResponse(error_body(message, None, code), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        return _error(RequestError(f"internal error: {type(exc).__name__}: {exc}", None, 500,
                                     None, "server_error"))

    return app


def _prepare(service: Service, raw: bytes, chat: bool) -> tuple[Any, list[list[int]], Any]:
    """The parsed request, its prompts as token ids and their params; RequestError else."""
    req = parse_request(raw, "chat" if chat else "completion")
    name = service.limits.model_name
    if req.model is not None and req.model != name:
        raise RequestError(f"model: {req.model!r} is not served here; use {name!r}",
                             "model", 404, "model_not_found")
    vocab = service.limits.cfg.model.vocab_size
    if isinstance(req, ChatRequest):
        prompts = [chat_prompt(req, service.chat_template, service.tokenizer, vocab)]
    else:
        prompts = resolve_prompts(req.prompt, service.tokenizer, vocab)
    params = [sampling_params(req, len(ids), service.limits, service.tokenizer)
              for ids in prompts]
    return req, prompts, params


async def _generate(service: Service, request: Request, chat: bool) -> Response:
    if service.draining:
        return _unavailable("the server is shutting down; retry on another replica",
                            "shutting_down")
    try:
        req, prompts, params = _prepare(service, await request.body(), chat)
    except RequestError as err:
        return _error(err)
    if service.num_waiting >= service.max_waiting:
        return _unavailable(f"overloaded: {service.num_waiting} requests are waiting "
                            f"(max_waiting {service.max_waiting}); retry later", "overloaded")
    prefix = "chatcmpl" if chat else "cmpl"
    tok = service.tokenizer
    shapes = Shapes(f"{prefix}-{uuid.uuid4().hex}", int(time.time()), service.limits.model_name,
                    chat, lambda t: tok.decode([t]))
    gen = Generation(service, shapes, prompts, params, req.include_usage)
    gen.submit()
    if req.stream:
        return StreamingResponse(gen.events(), media_type="text/event-stream")
    return await gen.collect(request)
