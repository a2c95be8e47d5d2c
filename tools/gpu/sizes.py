"""Problem sizes of the device measurements: real ones on CUDA, tiny ones for the CPU dry run."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Nominal H200 copy bandwidth (docs/design.md), used for the floor when no ceiling was measured.
NOMINAL_COPY_BPS = {"cuda": 4.3e12, "cpu": 1.0e10}


@dataclass(frozen=True)
class Sizes:
    """Problem sizes per device: real ones on CUDA, tiny ones for the CPU dry run."""

    copy_bytes: int
    matmul_n: int
    model: str
    model_dtype: torch.dtype
    rows: tuple[int, ...]
    context: int  # KV positions per decode row in the model-level core call
    runner_prompt: int  # prompt tokens per request in the runner-level measurement
    mixed_prompt: int  # prompt rows beside 8 decode rows in the mixed core call
    warmup: int
    repeats: int
    div_requests: int = 16  # the divergence stage: concurrent greedy requests,
    div_prompt: int = 512  # their longest prompt,
    div_tokens: int = 32  # and output tokens each


SIZES = {
    "cuda": Sizes(2 << 30, 8192, "ouro-1.4b", torch.bfloat16, (1, 8, 32), 512, 496, 128, 3, 20),
    "cpu": Sizes(16 << 20, 256, "tiny", torch.float32, (1, 8, 32), 32, 16, 8, 1, 5,
                div_requests=6, div_prompt=48, div_tokens=8),
}
