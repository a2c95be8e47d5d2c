"""A validated request to engine inputs: prompts as token ids and ``SamplingParams``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from engine.core.config import EngineConfig, ExitConfig
from engine.core.request import SamplingParams
from engine.tokenizer import Tokenizer
from loopserve.server.chat_template import ChatTemplate, ChatTemplateError
from loopserve.server.protocol import (
    MAX_PROMPTS,
    ChatRequest,
    RequestError,
    SamplingRequest,
    stop_strings,
)


@dataclass(frozen=True, slots=True)
class Limits:
    """What a request must fit: the served name, the vocabulary, the cache, the model."""

    model_name: str
    cfg: EngineConfig
    max_model_len: int


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value)


def _encode(text: str, tokenizer: Tokenizer, param: str) -> list[int]:
    try:
        return tokenizer.encode(text)
    except UnicodeError:  # a lone surrogate survives JSON decoding
        raise RequestError(f"{param}: not valid Unicode text", param) from None


def _checked(ids: list[int], vocab_size: int, param: str = "prompt") -> list[int]:
    if not ids:
        raise RequestError(f"{param}: empty; give at least one token", param)
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:  # a tokenizer larger than the model's vocabulary lands here too
        raise RequestError(f"{param}: token id {bad} is outside the model's vocabulary "
                           f"[0, {vocab_size})", param)
    return ids


def resolve_prompts(prompt: Any, tokenizer: Tokenizer, vocab_size: int) -> list[list[int]]:
    """Token ids of each prompt: a string, a list of ids, or a list of either (vLLM's
    batch: one choice per prompt)."""
    if isinstance(prompt, list) and prompt and (all(isinstance(p, str) for p in prompt)
                                                or all(isinstance(p, list) for p in prompt)):
        prompts = prompt
    elif isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        raise RequestError("prompt: a list of prompts must hold only strings or only token-id "
                           "lists", "prompt")
    else:
        prompts = [prompt]
    if len(prompts) > MAX_PROMPTS:
        raise RequestError(f"prompt: {len(prompts)} prompts; at most {MAX_PROMPTS} per request",
                           "prompt")
    out = []
    for p in prompts:
        if isinstance(p, str):
            out.append(_checked(_encode(p, tokenizer, "prompt"), vocab_size))
        elif _is_ids(p):
            out.append(_checked(list(p), vocab_size))
        else:
            raise RequestError("prompt: must be a string, a list of token ids, or a list of "
                               "either", "prompt")
    return out


def _text_content(content: Any, index: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for part in content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise RequestError(f"messages.{index}.content: only text parts are supported",
                               "messages")
        parts.append(part["text"])
    return "\n".join(parts)


def chat_prompt(req: ChatRequest, template: ChatTemplate | None, tokenizer: Tokenizer,
                vocab_size: int) -> list[int]:
    """The conversation rendered by the chat template, as token ids."""
    if template is None:
        raise RequestError("messages: this model has no chat template (none in its "
                           "tokenizer_config.json); start the server with --chat-template FILE "
                           "or use /v1/completions", "messages")
    messages = [{"role": m.role, "content": _text_content(m.content, i)}
                for i, m in enumerate(req.messages)]
    try:
        text = template.render(messages, req.add_generation_prompt)
    except ChatTemplateError as err:
        raise RequestError(str(err), "messages") from None
    return _checked(_encode(text, tokenizer, "messages"), vocab_size, "messages")


def _fits(cfg: EngineConfig, prompt_len: int, max_tokens: int) -> bool:
    return cfg.cache.required_blocks(prompt_len + max_tokens - 1,
                                     cfg.model.num_depths) <= cfg.cache.num_blocks


def _max_tokens(req: SamplingRequest, prompt_len: int, limits: Limits) -> tuple[int, str]:
    """The requested max_tokens and its field name; when unset (chat), the most that fits."""
    if isinstance(req, ChatRequest):
        if req.max_completion_tokens is not None:
            return req.max_completion_tokens, "max_completion_tokens"
        if req.max_tokens is None:
            lo, hi = 1, max(1, limits.max_model_len - prompt_len)
            while lo < hi:  # the largest count the cache can hold
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if _fits(limits.cfg, prompt_len, mid) else (lo, mid - 1)
            return lo, "max_tokens"
    return (16 if req.max_tokens is None else req.max_tokens), "max_tokens"


def sampling_params(req: SamplingRequest, prompt_len: int, limits: Limits,
                    tokenizer: Tokenizer) -> SamplingParams:
    """The engine's SamplingParams for a request; RequestError when it cannot fit."""
    cfg = limits.cfg
    max_tokens, field = _max_tokens(req, prompt_len, limits)
    prompt_param = "messages" if isinstance(req, ChatRequest) else "prompt"
    total = prompt_len + max_tokens
    if total > limits.max_model_len:
        param = prompt_param if prompt_len >= limits.max_model_len else field
        raise RequestError(f"{param}: {prompt_len} prompt tokens + {field} {max_tokens} "
                           f"exceed the model's {limits.max_model_len} positions", param)
    if not _fits(cfg, prompt_len, max_tokens):
        need = cfg.cache.required_blocks(total - 1, cfg.model.num_depths)
        param = prompt_param if cfg.cache.required_blocks(
            prompt_len, cfg.model.num_depths) > cfg.cache.num_blocks else field
        raise RequestError(
            f"{param}: {prompt_len} prompt tokens + {field} {max_tokens} need {need} KV "
            f"blocks but the cache holds {cfg.cache.num_blocks}; shorten the prompt or lower "
            f"{field}", param)
    if req.min_tokens > max_tokens:
        raise RequestError(f"min_tokens: {req.min_tokens} exceeds {field} {max_tokens}",
                           "min_tokens")
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
            n=req.n,
            logprobs=req.num_logprobs,
            stop=stop_strings(req),
            min_tokens=req.min_tokens,
            presence_penalty=req.presence_penalty or 0.0,
            frequency_penalty=req.frequency_penalty or 0.0,
            repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
        )
    except ValueError as err:
        field_name, _, message = str(err).partition(": ")
        param = field_name.rsplit(".", 1)[-1]
        raise RequestError(f"{param}: {message}", param) from None


def _exit_override(req: SamplingRequest, default: ExitConfig,
                   num_depths: int) -> ExitConfig | None:
    changes = {k: getattr(req, k) for k in ("exit_threshold", "min_loops", "max_loops")
               if getattr(req, k) is not None}
    if not changes:
        return None
    exit_cfg = dataclasses.replace(default, **changes)
    exit_cfg.resolved_max_loops(num_depths)
    return exit_cfg
