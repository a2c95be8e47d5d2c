"""What the HTTP handlers share: the engine thread, tokenizer, limits, metrics, settings."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine.tokenizer import Tokenizer
from loopserve.server.chat_template import ChatTemplate
from loopserve.server.engine_thread import EngineThread
from loopserve.server.metrics import ServerMetrics
from loopserve.server.params import Limits


@dataclass
class Service:
    """Everything the handlers share. ``in_flight`` counts accepted requests whose response
    is not done; the overload bound reads the engine's own waiting count instead, which
    does not depend on a response ever being started."""

    engine: EngineThread
    tokenizer: Tokenizer
    limits: Limits
    metrics: ServerMetrics
    max_waiting: int
    chat_template: ChatTemplate | None = None
    api_key: str | None = field(default=None, repr=False)
    in_flight: int = 0
    draining: bool = False
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def num_waiting(self) -> int:
        return self.engine.num_waiting
