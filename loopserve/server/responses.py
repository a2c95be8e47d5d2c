"""Response bodies and SSE events in OpenAI's (and vLLM's) shapes, for both endpoints.

Completions: ``text_completion`` objects, one choice per (prompt, sample); ``logprobs`` as
``{tokens, token_logprobs, top_logprobs, text_offset}`` where each ``top_logprobs`` entry
maps the top tokens' text to their log-probability, the sampled token included (vLLM's).
Chat: ``chat.completion`` with ``message.role``/``content``; ``chat.completion.chunk``
events whose first delta per choice carries the role; ``logprobs.content`` entries with
``token``, ``logprob``, ``bytes`` and ``top_logprobs``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from engine.core.request import TokenLogprobs
from loopserve.server.protocol import error_body

TokenText = Callable[[int], str]
DONE = b"data: [DONE]\n\n"


def sse(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def error_event(message: str) -> bytes:
    """An in-stream failure (the response has already started), OpenAI's error shape."""
    return sse(error_body(message, None, "engine_error", "server_error"))


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_logprobs(entries: list[tuple[TokenLogprobs, int]], text: TokenText
                        ) -> dict[str, Any]:
    """The legacy completions ``logprobs`` object of (logprobs, text offset) per token."""
    tops = []
    for lp, _ in entries:
        top = {text(t): v for t, v in lp.top}
        top.setdefault(text(lp.token_id), lp.logprob)
        tops.append(top)
    return {"tokens": [text(lp.token_id) for lp, _ in entries],
            "token_logprobs": [lp.logprob for lp, _ in entries],
            "top_logprobs": tops, "text_offset": [off for _, off in entries]}


def _chat_token(token_id: int, logprob: float, text: TokenText) -> dict[str, Any]:
    piece = text(token_id)
    return {"token": piece, "logprob": logprob, "bytes": list(piece.encode("utf-8"))}


def chat_logprobs(entries: list[tuple[TokenLogprobs, int]], text: TokenText) -> dict[str, Any]:
    """The chat ``logprobs`` object: ``{"content": [...]}``."""
    return {"content": [
        {**_chat_token(lp.token_id, lp.logprob, text),
         "top_logprobs": [_chat_token(t, v, text) for t, v in lp.top]}
        for lp, _ in entries]}


class Shapes:
    """The bodies of one response (id, creation time, model, endpoint kind)."""

    def __init__(self, rid: str, created: int, model: str, chat: bool, text: TokenText) -> None:
        self.rid, self.created, self.model, self.chat, self.text = rid, created, model, chat, text
        self.object = "chat.completion" if chat else "text_completion"

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.rid, "object": obj, "created": self.created, "model": self.model}

    def _logprobs(self, entries: list[tuple[TokenLogprobs, int]] | None) -> Any:
        if entries is None:
            return None
        return (chat_logprobs if self.chat else completion_logprobs)(entries, self.text)

    def role_chunk(self, index: int) -> bytes:
        return sse({**self._head("chat.completion.chunk"), "choices": [
            {"index": index, "delta": {"role": "assistant", "content": ""},
             "logprobs": None, "finish_reason": None}]})

    def chunk(self, index: int, text: str, finish_reason: str | None,
              entries: list[tuple[TokenLogprobs, int]] | None) -> bytes:
        """One streamed event of choice ``index``."""
        if self.chat:
            choice = {"index": index, "delta": {"content": text},
                      "logprobs": self._logprobs(entries), "finish_reason": finish_reason}
            return sse({**self._head("chat.completion.chunk"), "choices": [choice]})
        choice = {"index": index, "text": text, "logprobs": self._logprobs(entries),
                  "finish_reason": finish_reason}
        return sse({**self._head("text_completion"), "choices": [choice]})

    def usage_chunk(self, use: dict[str, int]) -> bytes:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return sse({**self._head(obj), "choices": [], "usage": use})

    def body(self, choices: list[tuple[str, str | None, list[tuple[TokenLogprobs, int]] | None]],
             use: dict[str, int]) -> dict[str, Any]:
        """The non-streamed response: (text, finish_reason, logprobs) per choice."""
        out = []
        for i, (text, reason, entries) in enumerate(choices):
            if self.chat:
                out.append({"index": i, "message": {"role": "assistant", "content": text},
                            "logprobs": self._logprobs(entries), "finish_reason": reason})
            else:
                out.append({"index": i, "text": text, "logprobs": self._logprobs(entries),
                            "finish_reason": reason})
        return {**self._head(self.object), "choices": out, "usage": use}
