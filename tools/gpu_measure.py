"""Device measurements for ``tools.gpu_check``, one subcommand per stage, each run in its own
process so a hang or a CUDA error cannot take the whole check down.

- ``env``: device facts (GPU name, memory, driver, torch/triton/python versions).
- ``ceilings``: device-to-device copy bandwidth (bytes read + written) and a bf16 matmul.
- ``core``: recurrent core call time at 1/8/32 decode rows (``tools.gpu_core``).

On CUDA everything is timed with CUDA events after warm-up; on CPU (the dry run) the same code
runs with tiny sizes and ``time.perf_counter``. Inputs are random, never zeros. Each
subcommand writes its result as JSON to ``--json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# Nominal H200 copy bandwidth (DESIGN.md §9), used for the floor when no ceiling was measured.
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
    warmup: int
    repeats: int


SIZES = {
    "cuda": Sizes(2 << 30, 8192, "ouro-1.4b", torch.bfloat16, (1, 8, 32), 512, 496, 3, 20),
    "cpu": Sizes(16 << 20, 256, "tiny", torch.float32, (1, 8, 32), 32, 16, 1, 5),
}


def log(msg: str) -> None:
    """Progress line with a wall-clock stamp (the parent echoes it)."""
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- timing -------------------------------------------------------------------------------
def time_repeats(
    fn: Callable[[], Any], device: torch.device, *, warmup: int, repeats: int
) -> list[float]:
    """Seconds per call of ``fn``: CUDA events around each call after ``warmup`` calls (CUDA),
    or ``perf_counter`` (CPU)."""
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        out = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out
    torch.cuda.synchronize(device)
    new_event = torch.cuda.Event
    events = [(new_event(enable_timing=True), new_event(enable_timing=True))  # type: ignore[no-untyped-call]
              for _ in range(repeats)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / 1e3 for start, end in events]


def timer_name(device: torch.device) -> str:
    return "cuda-events" if device.type == "cuda" else "perf_counter (dry run)"


def stats(samples: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(samples), "min_s": min(samples),
            "max_s": max(samples), "repeats": len(samples)}


# ---- env ----------------------------------------------------------------------------------
def _nvidia_smi() -> dict[str, str] | None:
    """A read-only ``nvidia-smi`` query (never a setting): the essential fields, then the
    extras one by one so an unsupported one costs only itself."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None

    def query(fields: tuple[str, ...]) -> dict[str, str] | str:
        try:
            res = subprocess.run([exe, f"--query-gpu={','.join(fields)}",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            return str(err)
        if res.returncode != 0 or not res.stdout.strip():
            return (res.stderr or res.stdout).strip()[:300]
        values = [v.strip() for v in res.stdout.splitlines()[0].split(",")]
        return dict(zip(fields, values, strict=False))

    base = query(("name", "memory.total", "driver_version"))
    if isinstance(base, str):
        return {"error": base}
    for extra in ("clocks.sm", "clocks.max.sm", "clocks.mem", "temperature.gpu", "power.limit"):
        got = query((extra,))
        if isinstance(got, dict):
            base.update(got)
    return base


def env_info(device: torch.device) -> dict[str, Any]:
    """What the check ran on: device, memory, driver and library versions."""
    info: dict[str, Any] = {
        "device": device.type,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "num_cpus": __import__("os").cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    try:
        info["triton"] = importlib.import_module("triton").__version__
    except ImportError:
        info["triton"] = None
    smi = _nvidia_smi()
    info["nvidia_smi"] = smi
    info["driver"] = (smi or {}).get("driver_version")
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    multiprocessors=props.multi_processor_count,
                    capability=f"{props.major}.{props.minor}")
    else:
        info.update(gpu=None, gpu_memory_gib=None)
    return info


# ---- ceilings -----------------------------------------------------------------------------
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


# ---- entry point --------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="gpu-check measurements (one stage per call)")
    ap.add_argument("what", choices=("env", "ceilings", "core"))
    ap.add_argument("--device", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--json", type=Path, required=True, help="where to write the result")
    ap.add_argument("--copy-bps", type=float, default=None,
                    help="measured copy bandwidth (bytes/s) for the core floor")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_measure: CUDA is not available", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    sizes = SIZES[args.device]
    if args.what == "env":
        result = env_info(device)
    elif args.what == "ceilings":
        result = ceilings(device, sizes)
    else:
        from tools.gpu_core import core

        result = core(device, sizes, args.copy_bps)
    args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
