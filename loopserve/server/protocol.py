"""OpenAI ``/v1/completions`` request validation, response bodies and error bodies.

The request schema is OpenAI's (model, prompt, max_tokens, temperature, top_p, seed, stop,
stream, stream_options.include_usage) plus loopserve's per-request exit settings
(``exit_threshold``, ``min_loops``, ``max_loops``) and, as vLLM accepts them, ``ignore_eos``,
``top_k`` and ``stop_token_ids``. Options the engine cannot honour (n > 1, best_of, echo,
logprobs, suffix, penalties, logit_bias) are rejected naming the field; other unknown fields
are ignored, as vLLM does. Every rejection is a ``RequestError`` that the app answers with
OpenAI's error shape.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.core.config import EngineConfig, ExitConfig
from engine.core.request import SamplingParams
from loopserve.server.tokenizer import Tokenizer


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


class CompletionRequest(_Strict):
    """The fields loopserve reads; ``prompt`` is checked by ``resolve_prompt``."""

    model: str | None = None
    prompt: Any = None
    max_tokens: int | None = Field(default=16, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = 1
    best_of: int | None = None
    echo: bool | None = False
    logprobs: int | None = None
    suffix: str | None = None
    presence_penalty: float | None = 0.0
    frequency_penalty: float | None = 0.0
    logit_bias: dict[str, Any] | None = None
    exit_threshold: float | None = Field(default=None, ge=0.0)
    min_loops: int | None = Field(default=None, ge=1)
    max_loops: int | None = Field(default=None, ge=1)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


# field -> (value that means "not asked for", why it is refused)
_UNSUPPORTED: dict[str, tuple[tuple[Any, ...], str]] = {
    "n": ((None, 1), "only n=1 is supported; send one request per completion"),
    "best_of": ((None, 1), "best_of is not supported; leave it unset"),
    "echo": ((None, False), "echo is not supported; leave it unset or false"),
    "logprobs": ((None,), "logprobs are not supported; leave it unset"),
    "suffix": ((None,), "suffix is not supported; leave it unset"),
    "presence_penalty": ((None, 0.0), "penalties are not supported; leave it 0"),
    "frequency_penalty": ((None, 0.0), "penalties are not supported; leave it 0"),
}


@dataclass(frozen=True, slots=True)
class Limits:
    """What a request must fit: the served name, the vocabulary, the cache, the model."""

    model_name: str
    cfg: EngineConfig
    max_model_len: int


def parse_request(raw: bytes) -> CompletionRequest:
    """Parse and type-check a request body; RequestError on malformed JSON or a bad field."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise RequestError(f"malformed JSON body: {err}", None) from None
    if not isinstance(data, dict):
        raise RequestError("the body must be a JSON object", None)
    try:
        req = CompletionRequest.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = [str(p) for p in first["loc"]]
        param = ".".join(loc[:2] if loc[0] == "stream_options" else loc[:1]) or None
        raise RequestError(f"{param}: {first['msg']}", param) from None
    for name, (unset, why) in _UNSUPPORTED.items():
        if getattr(req, name) not in unset:
            raise RequestError(f"{name}: {why}", name)
    if req.logit_bias:
        raise RequestError("logit_bias: not supported; leave it unset", "logit_bias")
    if req.stream_options is not None and not req.stream:
        raise RequestError("stream_options: only allowed with stream=true", "stream_options")
    if req.prompt is None:
        raise RequestError("prompt: required (a string or a list of token ids)", "prompt")
    return req


def resolve_prompt(prompt: Any, tokenizer: Tokenizer, vocab_size: int) -> list[int]:
    """Token ids of a string, a list of ids, or a one-element list of either."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        if len(prompt) != 1:
            raise RequestError(f"prompt: a list of {len(prompt)} prompts is not supported; "
                               "send one prompt per request", "prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
    elif isinstance(prompt, list) and all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        ids = list(prompt)
    else:
        raise RequestError("prompt: must be a string or a list of token ids", "prompt")
    if not ids:
        raise RequestError("prompt: empty; give at least one token", "prompt")
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:  # a tokenizer larger than the model's vocabulary lands here too
        raise RequestError(f"prompt: token id {bad} is outside the model's vocabulary "
                           f"[0, {vocab_size})", "prompt")
    return ids


def sampling_params(req: CompletionRequest, prompt_len: int, limits: Limits,
                    tokenizer: Tokenizer) -> SamplingParams:
    """The engine's SamplingParams for a request; RequestError when it cannot fit."""
    cfg = limits.cfg
    max_tokens = 16 if req.max_tokens is None else req.max_tokens
    total = prompt_len + max_tokens
    if total > limits.max_model_len:
        param = "prompt" if prompt_len >= limits.max_model_len else "max_tokens"
        raise RequestError(f"{param}: {prompt_len} prompt tokens + max_tokens {max_tokens} "
                           f"exceed the model's {limits.max_model_len} positions", param)
    need = cfg.cache.required_blocks(total - 1, cfg.model.num_depths)
    if need > cfg.cache.num_blocks:
        param = "prompt" if cfg.cache.required_blocks(
            prompt_len, cfg.model.num_depths) > cfg.cache.num_blocks else "max_tokens"
        raise RequestError(
            f"{param}: {prompt_len} prompt tokens + max_tokens {max_tokens} need {need} KV "
            f"blocks but the cache holds {cfg.cache.num_blocks}; shorten the prompt or lower "
            "max_tokens", param)
    try:
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if req.temperature is None else req.temperature,
            top_k=max(0, req.top_k or 0),
            top_p=1.0 if req.top_p is None else req.top_p,
            seed=req.seed,
            ignore_eos=req.ignore_eos,
            eos_token_id=tokenizer.eos_token_id,
            stop_token_ids=tuple(req.stop_token_ids or ()),
            exit=_exit_override(req, cfg.exit, cfg.model.num_depths),
        )
    except ValueError as err:
        field, _, message = str(err).partition(": ")
        param = field.rsplit(".", 1)[-1]
        raise RequestError(f"{param}: {message}", param) from None


def _exit_override(req: CompletionRequest, default: ExitConfig,
                   num_depths: int) -> ExitConfig | None:
    changes = {k: getattr(req, k) for k in ("exit_threshold", "min_loops", "max_loops")
               if getattr(req, k) is not None}
    if not changes:
        return None
    exit_cfg = dataclasses.replace(default, **changes)
    exit_cfg.resolved_max_loops(num_depths)
    return exit_cfg


def stop_strings(req: CompletionRequest) -> tuple[str, ...]:
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or ())
    if any(not s for s in stops):
        raise RequestError("stop: empty stop string; remove it", "stop")
    return tuple(stops)


# ---- responses -------------------------------------------------------------------------------
def chunk(rid: str, created: int, model: str, text: str, finish_reason: str | None) -> bytes:
    """One SSE event of a streamed completion."""
    body = {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None,
                         "finish_reason": finish_reason}]}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def usage_chunk(rid: str, created: int, model: str, use: dict[str, int]) -> bytes:
    body = {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": [], "usage": use}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def error_event(message: str) -> bytes:
    """An in-stream failure (the response has already started), OpenAI's error shape."""
    body = error_body(message, None, "engine_error", "server_error")
    return b"data: " + json.dumps(body).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def completion(rid: str, created: int, model: str, text: str, finish_reason: str | None,
               use: dict[str, int]) -> dict[str, Any]:
    """A non-streamed completion response."""
    return {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None,
                         "finish_reason": finish_reason}], "usage": use}
