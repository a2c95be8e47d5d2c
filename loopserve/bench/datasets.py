"""Benchmark prompts as ``vllm bench serve`` samples them, and the seeded arrival schedule.

ShareGPT: a JSON list of ``{"conversations": [{"from", "value"}, ...]}``; conversations with
at least two turns are kept, shuffled with the seed; the first turn is the prompt, the
second turn's token length (or ``output_len`` when given) the output length; pairs with a
prompt or output under 4 tokens, a prompt over 1,024 or prompt + output over 2,048 tokens are
skipped; when fewer than ``num_prompts`` remain, the kept ones repeat in the same order.
Random: prompts of random token ids, lengths uniform in ``[len * (1 - r), len * (1 + r)]``.
Arrivals: the first request at 0, then gamma gaps of shape ``burstiness`` and mean
1 / rate (``loopserve.workloads.base.arrival_times``, the simulator's own draw); rate inf
sends everything at 0.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loopserve.server.tokenizer import Tokenizer
from loopserve.workloads.base import arrival_times

MIN_TOKENS = 4
MAX_PROMPT_TOKENS = 1024
MAX_TOTAL_TOKENS = 2048


@dataclass(frozen=True, slots=True)
class SampleRequest:
    """One prompt to send: text or token ids, its token count, the output length asked for."""

    prompt: str | list[int]
    prompt_len: int
    output_len: int


def sample_sharegpt(path: str | Path, num_prompts: int, tokenizer: Tokenizer, seed: int,
                    output_len: int | None = None, *, max_prompt_len: int = MAX_PROMPT_TOKENS,
                    max_output_len: int | None = None) -> list[SampleRequest]:
    """``num_prompts`` requests from a ShareGPT file (module docstring); ``max_prompt_len``
    lowers the prompt bound, ``max_output_len`` caps output lengths (a scenario's
    ``max_prompt_tokens`` / ``max_output_tokens``). ValueError naming ``--dataset-path`` on a
    file that is unreadable or has no usable conversation."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"--dataset-path: cannot read {p} ({err.strerror or err})") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"--dataset-path: {p} is not valid JSON ({err})") from None
    if not isinstance(data, list):
        raise ValueError(f"--dataset-path: {p} must hold a JSON list of conversations")
    pairs = []
    for entry in data:
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if (isinstance(turns, list) and len(turns) >= 2
                and all(isinstance(t, dict) and isinstance(t.get("value"), str)
                        for t in turns[:2])):
            pairs.append((turns[0]["value"], turns[1]["value"]))
    order = np.random.default_rng(seed).permutation(len(pairs))
    kept: list[SampleRequest] = []
    for i in order:
        prompt, reply = pairs[int(i)]
        n_in = len(tokenizer.encode(prompt))
        n_out = output_len if output_len is not None else len(tokenizer.encode(reply))
        if n_in < MIN_TOKENS or (output_len is None and n_out < MIN_TOKENS):
            continue
        if n_in > min(max_prompt_len, MAX_PROMPT_TOKENS) or n_in + n_out > MAX_TOTAL_TOKENS:
            continue
        if max_output_len is not None:
            n_out = min(n_out, max_output_len)
        kept.append(SampleRequest(prompt, n_in, n_out))
        if len(kept) == num_prompts:
            break
    if not kept:
        raise ValueError(f"--dataset-path: {p} has no conversation of two turns within "
                         f"{MIN_TOKENS}-{min(max_prompt_len, MAX_PROMPT_TOKENS)} prompt tokens")
    return [kept[i % len(kept)] for i in range(num_prompts)]


def sample_random(num_prompts: int, input_len: int, output_len: int, range_ratio: float,
                  vocab_size: int, seed: int) -> list[SampleRequest]:
    """Prompts of random token ids below ``vocab_size``."""
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError(f"--random-range-ratio: must be in [0, 1), got {range_ratio}")
    rng = np.random.default_rng(seed)

    def lengths(n: int) -> np.ndarray:
        low, high = max(1, math.floor(n * (1 - range_ratio))), math.ceil(n * (1 + range_ratio))
        return rng.integers(low, high + 1, size=num_prompts)

    ins, outs = lengths(input_len), lengths(output_len)
    return [SampleRequest([int(t) for t in rng.integers(0, vocab_size, size=int(n))], int(n),
                          int(m)) for n, m in zip(ins, outs, strict=True)]


def arrival_offsets(n: int, request_rate: float, burstiness: float, seed: int) -> list[float]:
    """Send times (s from the start) of ``n`` requests."""
    if not request_rate > 0:
        raise ValueError(f"--request-rate: must be > 0 or inf, got {request_rate}")
    if not burstiness > 0:
        raise ValueError(f"--burstiness: must be > 0, got {burstiness}")
    if math.isinf(request_rate):
        return [0.0] * n
    return arrival_times(n, request_rate, burstiness, np.random.default_rng(seed))
