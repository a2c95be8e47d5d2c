"""The ``ceilings`` measurement: device-to-device copy bandwidth (bytes read + written) and a
bf16 matmul, on random data."""

from __future__ import annotations

from typing import Any

import torch

from tools.gpu.sizes import Sizes
from tools.gpu.timing import log, stats, time_repeats, timer_name


def measure_copy(device: torch.device, nbytes: int, warmup: int, repeats: int) -> dict[str, Any]:
    """Device-to-device copy of ``nbytes``; bandwidth counts bytes read plus bytes written."""
    n = nbytes // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    samples = time_repeats(lambda: dst.copy_(src), device, warmup=warmup, repeats=repeats)
    if not torch.equal(dst[:1024], src[:1024]):
        raise RuntimeError("copy ceiling: destination differs from source")
    moved = 2 * n * 4
    st = stats(samples)
    return {"bytes_moved": moved, **st, "bytes_per_s": moved / st["median_s"],
            "tb_per_s": moved / st["median_s"] / 1e12}


def measure_matmul(
    device: torch.device, n: int, dtype: torch.dtype, warmup: int, repeats: int
) -> dict[str, Any]:
    """An n x n x n product on random data; 2 n^3 FLOP per product."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    samples = time_repeats(lambda: torch.matmul(a, b, out=out), device,
                           warmup=warmup, repeats=repeats)
    if not torch.isfinite(out).all():
        raise RuntimeError("matmul ceiling: non-finite result")
    flop = 2 * n**3
    st = stats(samples)
    return {"n": n, "dtype": str(dtype).removeprefix("torch."), "flop": flop, **st,
            "tflop_per_s": flop / st["median_s"] / 1e12}


def ceilings(device: torch.device, sizes: Sizes) -> dict[str, Any]:
    log(f"copy {sizes.copy_bytes / 2**30:.3f} GiB, {sizes.repeats} repeats")
    copy = measure_copy(device, sizes.copy_bytes, sizes.warmup, sizes.repeats)
    log(f"copy: {copy['tb_per_s']:.4f} TB/s")
    log(f"matmul {sizes.matmul_n}^3 bf16")
    mm = measure_matmul(device, sizes.matmul_n, torch.bfloat16, sizes.warmup, sizes.repeats)
    log(f"matmul: {mm['tflop_per_s']:.3f} TFLOP/s")
    return {"timer": timer_name(device), "dry_run": device.type != "cuda", "copy": copy,
            "matmul": mm}
