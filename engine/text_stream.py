"""Streamed text of one request: incremental detokenization and stop strings.

As in OpenAI's API and vLLM, a stop string ends the request and is not part of its text; it
is found wherever it lands, across token boundaries too. While stop strings are set, the
last ``len(longest) - 1`` characters are held back (a stop string may be starting there) and
released when the request finishes for another reason. As in vLLM, stop strings are looked
for once the request has ``min_tokens`` tokens.
"""

from __future__ import annotations

from typing import Protocol


class TokenDecoder(Protocol):
    """Incremental detokenizer of one request: the text each new token adds."""

    def step(self, token_id: int) -> str: ...


class TextStream:
    """The text of one request's tokens, released as far as no stop string can still start."""

    def __init__(self, decoder: TokenDecoder, stops: tuple[str, ...] = (),
                 min_tokens: int = 0) -> None:
        self.decoder = decoder
        self.stops = stops
        self.min_tokens = min_tokens
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.text = ""
        self.sent = 0
        self.num_tokens = 0

    def add(self, token_id: int) -> tuple[str, bool]:
        """The text this token releases, and whether a stop string was reached."""
        before = len(self.text)
        self.text += self.decoder.step(token_id)
        self.num_tokens += 1
        if self.stops and self.num_tokens >= self.min_tokens:
            start = max(0, before - self.hold)
            hits = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
            if hits:
                end = min(hits)
                self.text = self.text[:end]
                return self._release(end), True
        return self._release(len(self.text) - self.hold), False

    def flush(self) -> str:
        """Everything not yet released (the request finished)."""
        return self._release(len(self.text))

    def _release(self, upto: int) -> str:
        if upto <= self.sent:
            return ""
        piece = self.text[self.sent:upto]
        self.sent = upto
        return piece
