"""``loopserve bench serve``'s dataset flags (vLLM's names and defaults) and the requests they
give. A chat backend sends text, so token-id prompts (random, prefix_repetition) are decoded
with the tokenizer first; ``prompt_len`` stays the number of ids drawn, as vLLM counts it."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from loopserve.bench.datasets import (
    SampleRequest,
    sample_prefix_repetition,
    sample_random,
    sample_sharegpt,
)
from loopserve.commands.args import flag_error, integer, number
from loopserve.errors import UserError
from loopserve.workloads.base import MAX_REQUEST_TOKENS, MAX_REQUESTS

DATASETS = ("sharegpt", "random", "prefix_repetition")
MAX_TOTAL_PROMPT_TOKENS = 1 << 28  # token ids held in memory for one benchmark's prompts


def add_dataset_flags(p: argparse.ArgumentParser) -> None:
    """The dataset flags, with vLLM's defaults."""
    p.add_argument("--dataset-name", default="sharegpt", choices=DATASETS)
    p.add_argument("--dataset-path", help="ShareGPT JSON file (sharegpt)")
    p.add_argument("--num-prompts", default="1000")
    p.add_argument("--sharegpt-output-len", help="fixed output length instead of the reply's")
    p.add_argument("--random-input-len", default="1024")
    p.add_argument("--random-output-len", default="128")
    p.add_argument("--random-range-ratio", default="0.0")
    p.add_argument("--prefix-repetition-prefix-len", default="256",
                   help="tokens of each shared prefix")
    p.add_argument("--prefix-repetition-suffix-len", default="256",
                   help="tokens after the prefix, different in every prompt")
    p.add_argument("--prefix-repetition-num-prefixes", default="10",
                   help="distinct prefixes; each starts num-prompts / this many prompts")
    p.add_argument("--prefix-repetition-output-len", default="128", help="output tokens")


def _length(flag: str, text: str, low: int) -> int:
    value = integer(flag, text, low)
    if value > MAX_REQUEST_TOKENS:
        raise UserError(flag, f"{value} is over the limit of {MAX_REQUEST_TOKENS} tokens")
    return value


def _check_total(n: int, per_prompt: float) -> None:
    if n * per_prompt > MAX_TOTAL_PROMPT_TOKENS:
        raise UserError("--num-prompts", f"{n} prompts of up to {per_prompt:g} tokens are over "
                        f"the limit of {MAX_TOTAL_PROMPT_TOKENS} prompt tokens in all")


def requests_from_args(args: argparse.Namespace, tokenizer: Any, vocab_size: int,
                       seed: int) -> list[SampleRequest]:
    """The requests the dataset flags describe; UserError naming the flag on a bad value."""
    n = integer("--num-prompts", args.num_prompts, 1)
    if n > MAX_REQUESTS:
        raise UserError("--num-prompts", f"{n} is over the limit of {MAX_REQUESTS}")
    try:
        if args.dataset_name == "sharegpt":
            if not args.dataset_path:
                raise UserError("--dataset-path", "required with --dataset-name sharegpt")
            out_len = None if args.sharegpt_output_len is None else integer(
                "--sharegpt-output-len", args.sharegpt_output_len, 1)
            reqs = sample_sharegpt(args.dataset_path, n, tokenizer, seed, out_len)
        elif args.dataset_name == "random":
            input_len = _length("--random-input-len", args.random_input_len, 1)
            ratio = number("--random-range-ratio", args.random_range_ratio, 0)
            _check_total(n, input_len * (1 + min(ratio, 1.0)))
            reqs = sample_random(n, input_len,
                                 _length("--random-output-len", args.random_output_len, 1),
                                 ratio, vocab_size, seed)
        else:
            prefix_len = _length("--prefix-repetition-prefix-len",
                                 args.prefix_repetition_prefix_len, 0)
            suffix_len = _length("--prefix-repetition-suffix-len",
                                 args.prefix_repetition_suffix_len, 1)
            _check_total(n, prefix_len + suffix_len)
            reqs = sample_prefix_repetition(
                n, prefix_len, suffix_len,
                integer("--prefix-repetition-num-prefixes",
                        args.prefix_repetition_num_prefixes, 1),
                _length("--prefix-repetition-output-len", args.prefix_repetition_output_len, 1),
                vocab_size, seed)
    except ValueError as err:
        raise flag_error(err, "--dataset-path") from None
    if args.backend == "openai-chat":
        reqs = [r if isinstance(r.prompt, str) else replace(r, prompt=tokenizer.decode(
            list(r.prompt))) for r in reqs]
    return reqs
