"""Benchmark prompts as ``vllm bench serve`` samples them, and the seeded arrival schedule.

ShareGPT: a JSON list of ``{"conversations": [{"from", "value"}, ...]}``; conversations with
at least two turns are kept, shuffled with the seed; the first turn is the prompt, the
second turn's token length (or ``output_len`` when given) the output length; pairs with a
prompt or output under 4 tokens, a prompt over 1,024 or prompt + output over 2,048 tokens are
skipped; when fewer than ``num_prompts`` remain, the kept ones repeat in the same order.
Random: prompts of random token ids, lengths uniform in ``[len * (1 - r), len * (1 + r)]``.
Prefix repetition: ``num_prefixes`` random prefixes of ``prefix_len`` token ids, each
followed by ``num_prompts // num_prefixes`` random suffixes of ``suffix_len`` ids, shuffled
with the seed and repeated in order up to ``num_prompts``: the requests of one prefix share
its leading tokens, which is what a prefix cache serves from.
Dataset files pass one guard first (``read_json_file``): a regular file, at most
``MAX_DATASET_BYTES``, UTF-8 JSON that the parser reads within its recursion limit. The arrival
schedule lives in ``loopserve.bench.schedule``.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.tokenizer import Tokenizer
from loopserve.bench.schedule import arrival_offsets

__all__ = ["SampleRequest", "arrival_offsets", "read_json_file", "sample_prefix_repetition",
           "sample_random", "sample_sharegpt"]

MIN_TOKENS = 4
MAX_PROMPT_TOKENS = 1024
MAX_TOTAL_TOKENS = 2048
MAX_DATASET_BYTES = 4 << 30  # ShareGPT V3 is 0.7 GB
JSON_RECURSION_LIMIT = 1000  # Python's default: JSON nested near this deep is refused


@dataclass(frozen=True, slots=True)
class SampleRequest:
    """One prompt to send: text or token ids, its token count, the output length asked for."""

    prompt: str | list[int]
    prompt_len: int
    output_len: int


def read_json_file(path: str | Path, flag: str, *, max_bytes: int | None = None) -> Any:
    """The JSON in ``path``; ValueError naming ``flag`` and the file when it is not a regular
    file (a FIFO or ``/dev/zero`` would block or never end), is larger than ``max_bytes``,
    not UTF-8, not JSON, or nested deeper than the parser's recursion limit.
    ``max_bytes`` defaults to ``MAX_DATASET_BYTES``."""
    p = Path(path)
    max_bytes = MAX_DATASET_BYTES if max_bytes is None else max_bytes
    try:
        with open(p, "rb", opener=lambda f, m: os.open(f, m | os.O_NONBLOCK)) as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{flag}: {p} is not a regular file")
            if st.st_size > max_bytes:
                raise ValueError(f"{flag}: {p} has {st.st_size} bytes, over the limit of "
                                 f"{max_bytes}")
            raw = fh.read(max_bytes + 1)
    except OSError as err:
        raise ValueError(f"{flag}: cannot read {p} ({err.strerror or err})") from None
    if len(raw) > max_bytes:
        raise ValueError(f"{flag}: {p} is over the limit of {max_bytes} bytes")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"{flag}: {p} is not UTF-8 (byte {err.start})") from None
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(min(limit, JSON_RECURSION_LIMIT))  # a library may have raised it
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{flag}: {p} is not valid JSON (line {err.lineno} column "
                         f"{err.colno}: {err.msg})") from None
    except RecursionError:
        raise ValueError(f"{flag}: {p} nests JSON too deeply") from None
    finally:
        sys.setrecursionlimit(limit)


def sample_sharegpt(path: str | Path, num_prompts: int, tokenizer: Tokenizer, seed: int,
                    output_len: int | None = None, *, max_prompt_len: int = MAX_PROMPT_TOKENS,
                    max_output_len: int | None = None) -> list[SampleRequest]:
    """``num_prompts`` requests from a ShareGPT file (module docstring); ``max_prompt_len``
    lowers the prompt bound, ``max_output_len`` caps output lengths (a scenario's
    ``max_prompt_tokens`` / ``max_output_tokens``). ValueError naming ``--dataset-path`` on a
    file that is unreadable or has no usable conversation."""
    p = Path(path)
    data = read_json_file(p, "--dataset-path")
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


def sample_prefix_repetition(num_prompts: int, prefix_len: int, suffix_len: int,
                             num_prefixes: int, output_len: int, vocab_size: int,
                             seed: int) -> list[SampleRequest]:
    """Prompts of random token ids that share ``num_prefixes`` prefixes (module
    docstring)."""
    per_prefix = num_prompts // num_prefixes
    if per_prefix == 0:
        raise ValueError(f"--prefix-repetition-num-prefixes: {num_prefixes} is more than "
                         f"--num-prompts {num_prompts}")
    rng = np.random.default_rng(seed)
    reqs = []
    for _ in range(num_prefixes):
        prefix = [int(t) for t in rng.integers(0, vocab_size, size=prefix_len)]
        for _ in range(per_prefix):
            suffix = [int(t) for t in rng.integers(0, vocab_size, size=suffix_len)]
            reqs.append(SampleRequest(prefix + suffix, prefix_len + suffix_len, output_len))
    order = rng.permutation(len(reqs))
    return [reqs[int(order[i % len(reqs)])] for i in range(num_prompts)]
