"""What the HTTP side hands the engine thread, and what comes back per request."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from engine.core.request import SamplingParams
from engine.output_processor import Delta


@dataclass(frozen=True, slots=True)
class Failure:
    """Delivered instead of tokens when a request fails in the engine."""

    message: str
    request_id: str = ""


Item = Delta | Failure


@dataclass(slots=True)
class Submission:
    """One sample of one prompt. ``leader``: the request whose first token this one waits
    for before admission; ``group``: sample 0's id for every sample of an ``n > 1`` prompt,
    whose prompt blocks they share (``engine.parallel_sampling``)."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    accepted_perf: float  # time.perf_counter() when the HTTP side accepted it
    sink: asyncio.Queue[list[Item]]
    leader: str | None = None
    group: str | None = None
