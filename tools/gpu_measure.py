"""Device measurements for ``tools.gpu_check``, one subcommand per stage, each run in its own
process so a hang or a CUDA error cannot take the whole check down.

- ``env``: device facts (GPU name, memory, driver, torch/triton/python versions).
- ``ceilings``: device-to-device copy bandwidth (bytes read + written) and a bf16 matmul.
- ``core``: recurrent core call time at 1/8/32 decode rows, straight through the model
  (``model.recurrent``) and as a RECURRENT step of ``engine.runner.ModelRunner``, against the
  weight-bandwidth floor (shared-stack bytes / measured copy bandwidth).

On CUDA everything is timed with CUDA events after warm-up; on CPU (the dry run) the same code
runs with tiny sizes and ``time.perf_counter``. Inputs are random, never zeros. Each
subcommand writes its result as JSON to ``--json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
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


def _stats(samples: list[float]) -> dict[str, float]:
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
    st = _stats(samples)
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
    st = _stats(samples)
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


# ---- core call ----------------------------------------------------------------------------
def random_model(preset: str, device: torch.device, dtype: torch.dtype, seed: int = 0) -> Any:
    """A preset with random weights drawn on the device (fast for 1.4B; timing only)."""
    from engine.model import empty_model, get_preset

    model = empty_model(get_preset(preset), device, dtype)
    gen = torch.Generator(device=device).manual_seed(seed)
    std = model.config.initializer_range
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.fill_(1.0)
            else:
                p.normal_(0.0, std, generator=gen)
    return model


def stack_bytes(model: Any) -> int:
    """Bytes of the weights one core call reads: the shared layers and the final norm."""
    mods = [*model.model.layers, model.model.norm]
    return sum(p.numel() * p.element_size() for m in mods for p in m.parameters())


def time_model_core(model: Any, device: torch.device, sizes: Sizes) -> list[dict[str, Any]]:
    """``model.recurrent`` over N decode rows, each at ``sizes.context`` KV positions."""
    from kernels.attention import AttentionMetadata, get_backend

    cfg = model.config
    bs = 16
    per_seq = math.ceil(sizes.context / bs)
    max_rows = max(sizes.rows)
    dims = (max_rows * per_seq, bs, cfg.num_key_value_heads, cfg.head_dim)
    dtype = next(model.parameters()).dtype
    kv = [(torch.randn(dims, device=device, dtype=dtype),
           torch.randn(dims, device=device, dtype=dtype)) for _ in range(cfg.num_hidden_layers)]
    backend = get_backend("torch")
    out = []
    for n in sizes.rows:
        tables = torch.arange(n * per_seq, device=device).view(n, per_seq)
        last = sizes.context - 1
        meta = AttentionMetadata(
            slot_mapping=tables[:, last // bs] * bs + last % bs,
            block_tables=tables,
            context_lens=torch.full((n,), sizes.context, device=device),
            query_start_loc=torch.arange(n + 1, device=device),
            block_size=bs, num_decode_seqs=n,
            context_lens_host=(sizes.context,) * n, query_lens_host=(1,) * n,
        )
        hidden = torch.randn(n, cfg.hidden_size, device=device, dtype=dtype)
        positions = torch.full((n,), last, device=device)

        def call(meta: Any = meta, hidden: torch.Tensor = hidden,
                 positions: torch.Tensor = positions) -> torch.Tensor:
            backend.prepare(meta)
            y: torch.Tensor = model.recurrent(hidden, positions, kv, meta, backend)
            return y

        with torch.inference_mode():
            samples = time_repeats(call, device, warmup=sizes.warmup, repeats=sizes.repeats)
            if not torch.isfinite(call()).all():
                raise RuntimeError(f"core call at {n} rows: non-finite output")
        out.append({"rows": n, "context": sizes.context, **_stats(samples)})
        log(f"model core call, {n:2d} rows: {out[-1]['median_s'] * 1e3:.3f} ms")
    return out


def time_runner_steps(model: Any, device: torch.device, sizes: Sizes) -> list[dict[str, Any]]:
    """RECURRENT steps of ``ModelRunner.execute`` with exactly N decode rows (no prompt rows),
    driven by a real ``EngineCore`` (prompts prefilled first, fixed exit at full depth)."""
    from engine.core import EngineCore, SamplingParams
    from engine.core.request import Stage
    from engine.llm import build_runner, make_engine_config

    max_rows = max(sizes.rows)
    prompt = sizes.runner_prompt
    # Every request is prefilled in one batch, so all N decode together from the first token.
    max_tokens = 3 + math.ceil((sizes.warmup + sizes.repeats) / model.config.total_ut_steps)
    block = 16
    per_req = math.ceil((prompt + max_tokens) / block) * model.config.total_ut_steps
    cfg = make_engine_config(
        model, arm="atomic", max_num_seqs=max_rows, prefill_chunk_size=prompt,
        max_num_batched_tokens=prompt * max_rows, num_blocks=per_req * max_rows + 8, block_size=block,
    )
    dtype = next(model.parameters()).dtype
    runner = build_runner(model, cfg, device, dtype)
    out = []
    gen = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    for n in sizes.rows:
        core = EngineCore(cfg)
        runner.bind(core)
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        for i in range(n):
            ids = torch.randint(0, vocab, (prompt,), generator=gen).tolist()
            core.add_request(f"r{i}", ids, params, 0.0)
        samples: list[float] = []
        prepare: list[float] = []
        seen = 0
        now = 0.0
        while core.has_work() and len(samples) < sizes.repeats:
            batch = core.schedule(now)
            if batch is None:
                raise RuntimeError("runner timing: core has work but scheduled nothing")
            timed = (batch.stage is Stage.RECURRENT and batch.num_decode_items == n
                     and batch.num_prompt_items == 0)
            if timed:
                seen += 1
            if timed and seen > sizes.warmup:
                (step_s,), result = _timed_once(partial(runner.execute, batch), device)
                samples.append(step_s)
                prepare.append(runner.last_prepare_s)
            else:
                result = runner.execute(batch)
            now += 1.0
            core.apply(batch, result, now)
            core.pop_finished()
        if len(samples) < max(1, sizes.repeats // 2):
            raise RuntimeError(f"runner timing: only {len(samples)} {n}-row decode steps formed")
        out.append({"rows": n, "context": prompt, **_stats(samples),
                    "prepare_median_s": statistics.median(prepare)})
        log(f"runner RECURRENT step, {n:2d} rows: {out[-1]['median_s'] * 1e3:.3f} ms "
            f"(host prepare {out[-1]['prepare_median_s'] * 1e3:.3f} ms)")
    return out


def _timed_once(fn: Callable[[], Any], device: torch.device) -> tuple[list[float], Any]:
    """One call, timed like ``time_repeats`` (CUDA events on an idle device), and its value."""
    box: list[Any] = []
    samples = time_repeats(lambda: box.append(fn()), device, warmup=0, repeats=1)
    return samples, box[0]


def core(device: torch.device, sizes: Sizes, copy_bps: float | None) -> dict[str, Any]:
    """Model-level and runner-level core call times against the weight-bandwidth floor."""
    bw = copy_bps or NOMINAL_COPY_BPS[device.type]
    log(f"building {sizes.model} with random weights ({sizes.model_dtype}) on {device}")
    t0 = time.perf_counter()
    model = random_model(sizes.model, device, sizes.model_dtype)
    weights = stack_bytes(model)
    floor = weights / bw
    log(f"built in {time.perf_counter() - t0:.1f} s; stack {weights / 1e9:.3f} GB, "
        f"floor {floor * 1e3:.4f} ms at {bw / 1e12:.3f} TB/s")
    res: dict[str, Any] = {
        "model": sizes.model, "dtype": str(sizes.model_dtype).removeprefix("torch."),
        "timer": timer_name(device), "dry_run": device.type != "cuda",
        "stack_bytes": weights, "copy_bytes_per_s": bw,
        "bandwidth_source": "measured" if copy_bps else "nominal", "floor_s": floor,
    }
    res["model_core"] = time_model_core(model, device, sizes)
    try:
        import engine.runner  # noqa: F401
    except ImportError as err:
        res["runner"] = None
        res["runner_error"] = f"runner: not available ({err})"
        log(res["runner_error"])
        return res
    res["runner"] = time_runner_steps(model, device, sizes)
    return res


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
        result = core(device, sizes, args.copy_bps)
    args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
