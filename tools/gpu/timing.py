"""How the device measurements time a call: CUDA events after warm-up on a GPU,
``perf_counter`` on the CPU dry run; plus their summary statistics and progress lines.
Imports no other module of ``tools.gpu``."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def log(msg: str) -> None:
    """Progress line with a wall-clock stamp (the parent echoes it)."""
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", flush=True)


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


def timed_once(fn: Callable[[], Any], device: torch.device) -> tuple[list[float], Any]:
    """One call, timed like ``time_repeats`` (CUDA events on an idle device), and its value."""
    box: list[Any] = []
    samples = time_repeats(lambda: box.append(fn()), device, warmup=0, repeats=1)
    return samples, box[0]
