"""The ``divergence`` measurement of ``tools.gpu.measure`` (RFC §6, GPU bullet): bf16 greedy
generation under concurrent load in every arm, A2 against A1 and A0 (and A1 against A0), with
the first divergent token and the first exit-depth divergence of each pair, found by the
project's reporter (``tests.reference.divergence``).

Random bf16 weights (the gate too, so ouro exits vary), every request submitted at once so
A2 packs decode and prompt rows into its core calls, attention ``auto`` (triton on CUDA).
Divergence in bf16 is allowed (near-ties flip); what is reported is where it starts.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import torch

from engine.core import ExitConfig, SamplingParams
from engine.llm import LLM
from tests.reference.divergence import divergence_report, first_divergence
from tools.gpu.core import random_model
from tools.gpu.sizes import Sizes
from tools.gpu.timing import log

ARMS = ("mixed", "per_depth", "atomic")
Output = tuple[list[int], list[int]]


def first_depth_divergence(a: Output, b: Output) -> int | None:
    """Output index of the first exit depth that differs (None: none in the common part)."""
    return next((i for i, (x, y) in enumerate(zip(a[1], b[1], strict=False)) if x != y), None)


def compare(name_a: str, runs_a: list[Output], name_b: str, runs_b: list[Output]
            ) -> dict[str, Any]:
    """Per pair of arms: requests that differ, the earliest divergence of any kind and of
    exit depth (request, output index, what), the tokens matched before it, the report."""
    first: tuple[int, int, str] | None = None
    first_depth: tuple[int, int] | None = None
    matched = total = 0
    for r, (a, b) in enumerate(zip(runs_a, runs_b, strict=True)):
        d = first_divergence(a, b)
        total += len(a[0])
        matched += len(a[0]) if d is None else d[0]
        if d is not None and (first is None or d[0] < first[1]):
            first = (r, d[0], d[1])
        dd = first_depth_divergence(a, b)
        if dd is not None and (first_depth is None or dd < first_depth[1]):
            first_depth = (r, dd)
    lines = divergence_report(name_a, runs_a, name_b, runs_b)
    return {
        "pair": f"{name_a} vs {name_b}", "requests_differing": len(lines),
        "first": None if first is None else {"request": first[0], "output_index": first[1],
                                             "what": first[2]},
        "first_depth": None if first_depth is None else {
            "request": first_depth[0], "output_index": first_depth[1]},
        "matched_fraction": matched / total if total else 1.0, "report": lines,
    }


def gated_workload(device: torch.device, sizes: Sizes,
                   dtype: torch.dtype) -> tuple[Any, list[list[int]], SamplingParams]:
    """A random model whose exit gate varies (so exit depths differ between runs that
    diverge), with the same seeded prompts and sampling for every run compared."""
    model = random_model(sizes.model, device, dtype, seed=3)
    with torch.no_grad():  # a gate that varies, so exit depths are compared too
        gate = model.model.early_exit_gate
        gate.weight.normal_(0.0, 2.0 / gate.weight.shape[1] ** 0.5)
        gate.bias.zero_()
    gen = torch.Generator().manual_seed(11)
    vocab = model.config.vocab_size
    lengths = torch.randint(sizes.div_prompt // 4, sizes.div_prompt + 1, (sizes.div_requests,),
                            generator=gen).tolist()
    prompts = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]
    params = SamplingParams(max_tokens=sizes.div_tokens, ignore_eos=True)
    return model, prompts, params


def divergence(device: torch.device, sizes: Sizes) -> dict[str, Any]:
    """Every arm on the same seeded prompts; each pair compared."""
    dtype = torch.bfloat16
    model, prompts, params = gated_workload(device, sizes, dtype)
    exit_cfg = ExitConfig(mode="ouro", exit_threshold=0.5)
    runs: dict[str, list[Output]] = {}
    backend = None
    for arm in ARMS:
        llm = LLM(model, arm=arm, device=device, dtype=dtype, exit=exit_cfg,
                  max_num_seqs=sizes.div_requests, max_num_batched_tokens=256,
                  prefill_chunk_size=128, block_size=16,
                  num_blocks=sizes.div_requests * 4 * (-(-(sizes.div_prompt + sizes.div_tokens)
                                                         // 16) + 1))
        backend = llm.runner.backend.name
        runs[arm] = [(o.output_token_ids, o.exit_depths) for o in llm.generate(prompts, params)]
        log(f"divergence: {arm} done ({backend} attention)")
    pairs = [compare(a, runs[a], b, runs[b]) for a, b in combinations(ARMS, 2)]
    for p in pairs:
        log(f"{p['pair']}: {p['requests_differing']} of {len(prompts)} requests differ; first "
            f"{p['first']}; first exit-depth divergence {p['first_depth']}")
    depths = sorted({d for _, ds in runs["atomic"] for d in ds})
    return {"model": sizes.model, "dtype": "bfloat16", "attention_backend": backend,
            "requests": len(prompts), "max_tokens": sizes.div_tokens,
            "prompt_lengths": [len(p) for p in prompts],
            "exit_depths_seen": depths, "pairs": pairs}
