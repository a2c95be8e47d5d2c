"""Requests shaped like a ShareGPT conversation dump, with Poisson (or gamma) arrivals.

The file is a JSON list of ``{"conversations": [{"from": "human" | "gpt", "value": str},
...]}``. As in vLLM's benchmark, a conversation contributes its first turn (the prompt, from
``human``) and its second (the reference output, from ``gpt``); conversations with fewer than
two turns or another order are skipped. Token counts are approximated without a tokenizer:
``ceil(len(text) / 4)`` characters-per-token (about 4 for English BPE vocabularies), at least
1, then capped at ``max_prompt_tokens`` / ``max_output_tokens``. ``num_requests``
conversations are drawn in a seeded random order, cycling if the file has fewer. Prompt ids
are synthetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from engine.core.guarded_read import FileReadError, read_json
from engine.core.records import ArrivalSpec
from loopserve.workloads.base import (
    MIN_REQUEST_RATE,
    Count,
    StaticSource,
    StrictModel,
    Tokens,
    arrival_times,
    prompt_ids,
    request_trace,
    sampling_params,
)

CHARS_PER_TOKEN = 4


def approx_tokens(text: str) -> int:
    """Deterministic token-count estimate of ``text`` (no tokenizer)."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def load_sharegpt(path: str | Path) -> list[tuple[int, int]]:
    """(prompt_tokens, output_tokens) of every usable conversation, in file order."""
    p = Path(path)
    try:
        data = read_json(p)
    except FileReadError as exc:
        raise ValueError(f"workload.path: {exc}") from None
    if not isinstance(data, list):
        raise ValueError(f"workload.path: {p} must hold a JSON list of conversations")
    pairs: list[tuple[int, int]] = []
    for entry in data:
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, second = turns[0], turns[1]
        if not (isinstance(first, dict) and isinstance(second, dict)):
            continue
        if first.get("from") != "human" or second.get("from") != "gpt":
            continue
        prompt, output = first.get("value"), second.get("value")
        if not isinstance(prompt, str) or not isinstance(output, str):
            continue
        pairs.append((approx_tokens(prompt), approx_tokens(output)))
    if not pairs:
        raise ValueError(f"workload.path: {p} has no conversation starting with a human turn "
                         "followed by a gpt turn")
    return pairs


class ShareGPTWorkload(StrictModel):
    """ShareGPT-shaped lengths at ``request_rate`` req/s."""

    kind: Literal["sharegpt"]
    path: str = Field(min_length=1)
    num_requests: Count
    request_rate: float = Field(ge=MIN_REQUEST_RATE, allow_inf_nan=False)
    burstiness: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    max_prompt_tokens: Tokens = 1024
    max_output_tokens: Tokens = 1024

    def build(
        self, *, seed: int, vocab_size: int, exit_trace: Sequence[int] | None = None
    ) -> StaticSource:
        pairs = load_sharegpt(self.path)
        rng = np.random.default_rng(seed)
        times = arrival_times(self.num_requests, self.request_rate, self.burstiness, rng)
        order = rng.permutation(len(pairs))
        specs = []
        for i in range(self.num_requests):
            prompt, output = pairs[int(order[i % len(pairs)])]
            prompt = min(prompt, self.max_prompt_tokens)
            output = min(output, self.max_output_tokens)
            specs.append(ArrivalSpec(
                f"req-{i}",
                prompt_ids(seed, i, prompt, vocab_size),
                sampling_params(output, request_trace(output, None, exit_trace)),
                arrival_s=times[i],
            ))
        return StaticSource(specs)
