"""``python -m tools.gpu.footprint_measure --device cuda --json PATH``: the footprint estimate
(``loopserve.plan.footprint.device_bytes``) against ``torch.cuda.max_memory_allocated`` of a
real run with the same configuration, per arm, in a process of its own.

The model is built once; before each arm the allocator's peak is reset with only the weights
held, so an arm's peak is its weights plus its KV, state buffers and largest step. Requests
are long enough for the largest steps to form: a full chunk of prompt beside decode rows.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path
from typing import Any

import torch

from engine.core.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm import LLM
from engine.model.build import build_model
from loopserve.plan import footprint

MODEL = "ouro-1.4b"
# The gpu-check scenario's engine, with room to spare in the KV cache.
ENGINE: dict[str, Any] = {"max_num_seqs": 16, "max_num_batched_tokens": 256,
                          "prefill_chunk_size": 128, "block_size": 16, "num_blocks": 4096}
NUM_PROMPTS, PROMPT_TOKENS, OUTPUT_TOKENS = 16, 384, 16
# The estimate must hold the measured peak and stay within this multiple of it.
MULTIPLE = 2.0


def compare(cfg: EngineConfig, peak_bytes: int, dtype_bytes: int, max_context: int,
            attention: str) -> dict[str, Any]:
    """The estimate for ``cfg`` beside a measured peak: both in bytes, their ratio, and
    whether the estimate holds the peak within ``MULTIPLE``."""
    est = footprint.device_bytes(cfg, dtype_bytes, max_context, attention)
    ratio = est / peak_bytes if peak_bytes > 0 else float("inf")
    return {"estimate_bytes": est, "max_memory_allocated_bytes": peak_bytes,
            "estimate_over_peak": round(ratio, 3), "ok": 1.0 <= ratio <= MULTIPLE}


def measure(device: torch.device) -> dict[str, Any]:
    """Per arm, the estimate and the measured peak of the same run (CUDA only)."""
    dtype = torch.bfloat16
    model = build_model(MODEL, seed=0, device=device, dtype=dtype)
    weights = sum(t.numel() * t.element_size()
                  for t in [*model.parameters(), *model.buffers()])
    prompts = [list(range(1, PROMPT_TOKENS + 1 + 7 * i)) for i in range(NUM_PROMPTS)]
    longest = PROMPT_TOKENS + 7 * (NUM_PROMPTS - 1) + OUTPUT_TOKENS
    arms: dict[str, Any] = {}
    for arm in ("atomic", "per_depth", "mixed", "wavefront"):
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        held = torch.cuda.memory_allocated() - weights  # what is not this run's: ~0
        llm = LLM(model, arm=arm, device=device, dtype=dtype, **ENGINE)
        llm.generate(prompts, [SamplingParams(max_tokens=OUTPUT_TOKENS, ignore_eos=True)]
                     * NUM_PROMPTS)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - held
        arms[arm] = compare(llm.cfg, peak, 2, longest, llm.runner.backend.name)
        del llm
    return {"model": MODEL, "engine": ENGINE, "weights_bytes": weights, "multiple": MULTIPLE,
            "max_context": longest, "arms": arms}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="gpu-check: footprint estimate against the peak")
    ap.add_argument("--device", choices=("cuda",), required=True)
    ap.add_argument("--json", type=Path, required=True, help="where to write the result")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("tools.gpu.footprint_measure: CUDA is not available", file=sys.stderr)
        return 2
    result = measure(torch.device("cuda"))
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
