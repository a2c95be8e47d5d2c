"""OpenAI ``/v1/completions`` and ``/v1/chat/completions`` request schemas and errors.

The schemas are OpenAI's, with vLLM's sampling extras (``top_k``, ``min_tokens``,
``repetition_penalty``, ``stop_token_ids``, ``ignore_eos``) and loopserve's per-request exit
settings (``exit_threshold``, ``min_loops``, ``max_loops``). Options the engine cannot honour
(``best_of`` > 1, ``echo``, ``suffix``, ``logit_bias``, tools, ``response_format``) are
refused naming the field; other unknown fields are ignored, as vLLM does. Every rejection is
a ``RequestError``, answered in OpenAI's error shape.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.core.request import MAX_LOGPROBS

MAX_N = 64  # samples per prompt
MAX_PROMPTS = 256  # prompts in one completions request


class RequestError(Exception):
    """A request the server answers with ``status`` and OpenAI's error body."""

    def __init__(self, message: str, param: str | None, status: int = 400,
                 code: str | None = None, type_: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.code, self.type = (
            message, param, status, code, type_)

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.param, self.code, self.type)


def error_body(message: str, param: str | None, code: str | None = None,
               type_: str = "invalid_request_error") -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class StreamOptions(_Strict):
    include_usage: bool = False


class SamplingRequest(_Strict):
    """The fields both endpoints share."""

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**64)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = Field(default=None, max_length=1024)
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=MAX_N)
    presence_penalty: float | None = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=0.0, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(default=1.0, gt=0.0, le=2.0)
    min_tokens: int = Field(default=0, ge=0)
    logit_bias: dict[str, Any] | None = None
    exit_threshold: float | None = Field(default=None, ge=0.0)
    min_loops: int | None = Field(default=None, ge=1)
    max_loops: int | None = Field(default=None, ge=1)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def num_logprobs(self) -> int | None:
        return None


class CompletionRequest(SamplingRequest):
    """``prompt`` is checked by ``params.resolve_prompts``."""

    prompt: Any = None
    max_tokens: int | None = Field(default=16, ge=1)
    best_of: int | None = None
    echo: bool | None = False
    logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    suffix: str | None = None

    @property
    def num_logprobs(self) -> int | None:
        return self.logprobs


class ChatMessage(_Strict):
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    add_generation_prompt: bool = True
    tools: Any = None
    tool_choice: Any = None
    response_format: Any = None

    @property
    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


# field -> (values that mean "not asked for", why it is refused)
_REFUSED: dict[str, tuple[tuple[Any, ...], str]] = {
    "best_of": ((None, 1), "best_of is not supported; use n"),
    "echo": ((None, False), "echo is not supported; leave it unset or false"),
    "suffix": ((None,), "suffix is not supported; leave it unset"),
    "tools": ((None, []), "tool calling is not supported; leave it unset"),
    "tool_choice": ((None, "none"), "tool calling is not supported; leave it unset"),
    "response_format": ((None,), "structured output is not supported; leave it unset"),
}


def _json(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        why = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise RequestError(f"malformed JSON body: {why}", None) from None
    if not isinstance(data, dict):
        raise RequestError("the body must be a JSON object", None)
    return data


def parse_request(raw: bytes, kind: Literal["completion", "chat"] = "completion"
                  ) -> CompletionRequest | ChatRequest:
    """Parse and type-check a request body; RequestError on malformed JSON or a bad field."""
    data = _json(raw)
    model = CompletionRequest if kind == "completion" else ChatRequest
    try:
        req: CompletionRequest | ChatRequest = model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = [str(p) for p in first["loc"]] or ["body"]
        param = ".".join(loc[:2] if loc[0] == "stream_options" else loc[:1])
        raise RequestError(f"{param}: {first['msg']}", param) from None
    except RecursionError:
        raise RequestError("malformed JSON body: nested too deeply", None) from None
    for name, (unset, why) in _REFUSED.items():
        if name in type(req).model_fields and getattr(req, name) not in unset:
            raise RequestError(f"{name}: {why}", name)
    if req.logit_bias:
        raise RequestError("logit_bias: not supported; leave it unset", "logit_bias")
    if req.stream_options is not None and not req.stream:
        raise RequestError("stream_options: only allowed with stream=true", "stream_options")
    if isinstance(req, CompletionRequest) and req.prompt is None:
        raise RequestError("prompt: required (a string, a list of token ids, or a list of "
                           "either)", "prompt")
    if isinstance(req, ChatRequest) and req.top_logprobs and not req.logprobs:
        raise RequestError("top_logprobs: needs logprobs=true", "top_logprobs")
    return req


def stop_strings(req: SamplingRequest) -> tuple[str, ...]:
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or ())
    if any(not s for s in stops):
        raise RequestError("stop: empty stop string; remove it", "stop")
    return tuple(stops)
