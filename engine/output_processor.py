"""Token events to text: incremental detokenization, stop strings, text offsets.

The front ends (``LLM``, the server's engine thread) pass every step's token events through
one ``OutputProcessor``. A request registered with stop strings has its text watched; when
one appears, the processor finishes the request in the core with reason ``stop``
(``EngineCore.abort(rid, "stop")``, which releases its KV at once), and the text ends before the
stop string. Without a tokenizer there is no text, and stop strings are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from engine.core.engine_core import EngineCore
from engine.core.request import SamplingParams
from engine.core.results import TokenEvent
from engine.text_stream import TextStream, TokenDecoder


class TextTokenizer(Protocol):
    """What the processor needs from a tokenizer."""

    def decoder(self) -> TokenDecoder: ...


@dataclass(slots=True)
class Delta:
    """One token of a request as a front end sees it: the text it releases, where its own
    text starts in the request's text, and the request's final finish reason (``stop`` when
    a stop string ended it)."""

    event: TokenEvent
    text: str
    text_offset: int
    finished: bool
    finish_reason: str | None


class OutputProcessor:
    """Text streams of the registered requests of ``core``."""

    def __init__(self, core: EngineCore, tokenizer: TextTokenizer | None = None) -> None:
        self.core = core
        self.tokenizer = tokenizer
        self._streams: dict[str, TextStream] = {}

    def add(self, request_id: str, params: SamplingParams) -> None:
        """Watch ``request_id``'s text; ValueError for stop strings without a tokenizer."""
        if self.tokenizer is None:
            if params.stop:
                raise ValueError("stop: stop strings need a tokenizer; pass tokenizer=")
            return
        self._streams[request_id] = TextStream(
            self.tokenizer.decoder(), params.stop, params.min_tokens)

    def drop(self, request_id: str) -> None:
        self._streams.pop(request_id, None)

    def text(self, request_id: str) -> str | None:
        stream = self._streams.get(request_id)
        return None if stream is None else stream.text

    def process(self, events: Sequence[TokenEvent]) -> list[Delta]:
        """The deltas of a step's events; an event whose token completes a stop string is
        marked finished with reason ``stop``."""
        out: list[Delta] = []
        stopped: set[str] = set()
        for ev in events:
            rid = ev.request_id
            if rid in stopped:
                continue
            stream = self._streams.get(rid)
            if stream is None:
                out.append(Delta(ev, "", 0, ev.finished, ev.finish_reason))
                continue
            offset = len(stream.text)
            piece, hit = stream.add(ev.token_id)
            if hit:
                if not ev.finished:
                    self.core.abort(rid, "stop")
                    ev.finished, ev.finish_reason = True, "stop"  # the event ends it now
                stopped.add(rid)
                out.append(Delta(ev, piece, offset, True, "stop"))
                continue
            if ev.finished:
                piece += stream.flush()
            out.append(Delta(ev, piece, offset, ev.finished, ev.finish_reason))
        return out

    def finish(self, request_id: str) -> str | None:
        """Forget a finished request; its full text (None without a stream)."""
        stream = self._streams.pop(request_id, None)
        return None if stream is None else stream.text
