"""The ``core`` measurement of ``tools.gpu.measure``: recurrent core call time at 1/8/32 decode
rows, straight through the model (``model.recurrent``) and as a RECURRENT step of
``engine.runner.ModelRunner``, against the weight-bandwidth floor (shared-stack bytes over the
measured copy bandwidth)."""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from engine.core import EngineCore, SamplingParams
from engine.core.request import Stage
from engine.llm import build_runner, make_engine_config
from engine.model import empty_model, get_preset, init_random_weights
from kernels.attention import AttentionBackend, AttentionShape, available_backends, get_backend
from kernels.attention.cases import make_case
from tools.gpu.sizes import NOMINAL_COPY_BPS, Sizes
from tools.gpu.timing import log, stats, time_repeats, timed_once, timer_name


def random_model(preset: str, device: torch.device, dtype: torch.dtype, seed: int = 0) -> Any:
    """A preset with random weights drawn on the device (fast for 1.4B; timing only)."""
    return init_random_weights(empty_model(get_preset(preset), device, dtype), seed,
                               on_device=True)


def stack_bytes(model: Any) -> int:
    """Bytes of the weights one core call reads: the shared layers and the final norm."""
    mods = [*model.model.layers, model.model.norm]
    return sum(p.numel() * p.element_size() for m in mods for p in m.parameters())


def core_shapes(sizes: Sizes) -> list[tuple[int, int]]:
    """(decode rows, prompt rows) of the model-level calls: decode-only at every row count,
    then 8 decode rows beside one prompt chunk (A2's mixed call)."""
    return [(n, 0) for n in sizes.rows] + [(8, sizes.mixed_prompt)]


def attention_backends(shape: AttentionShape) -> dict[str, AttentionBackend]:
    """torch, and triton where it runs (CUDA, or the interpreter in the dry run)."""
    return {name: get_backend(name, shape) for name in available_backends()
            if name in ("torch", "triton")}


def time_model_core(model: Any, device: torch.device, sizes: Sizes) -> list[dict[str, Any]]:
    """``model.recurrent`` over each shape of ``core_shapes`` (every sequence at
    ``sizes.context`` KV positions), with every attention backend; per-layer caches of their
    own, so no layer reads another's KV from L2."""
    cfg = model.config
    dtype = next(model.parameters()).dtype
    shape = AttentionShape(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, dtype)
    out = []
    for backend_name, backend in attention_backends(shape).items():
        for decode, prompt in core_shapes(sizes):
            case = make_case([sizes.context] * decode,
                             [(sizes.context, prompt)] if prompt else [],
                             num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads,
                             head_dim=shape.head_dim, block_size=16, dtype=dtype, device=device)
            dims = case.k_cache.shape
            kv = [(torch.randn(dims, device=device, dtype=dtype),
                   torch.randn(dims, device=device, dtype=dtype))
                  for _ in range(cfg.num_hidden_layers)]
            meta = case.meta
            rows = meta.num_rows
            hidden = torch.randn(rows, cfg.hidden_size, device=device, dtype=dtype)
            positions = torch.tensor(
                [sizes.context - 1] * decode + list(range(sizes.context - prompt, sizes.context)),
                device=device)

            def call(meta: Any = meta, hidden: torch.Tensor = hidden, kv: Any = kv,
                     positions: torch.Tensor = positions, backend: Any = backend
                     ) -> torch.Tensor:
                backend.prepare(meta)
                y: torch.Tensor = model.recurrent(hidden, positions, kv, meta, backend)
                return y

            with torch.inference_mode():
                samples = time_repeats(call, device, warmup=sizes.warmup, repeats=sizes.repeats)
                if not torch.isfinite(call()).all():
                    raise RuntimeError(f"core call at {decode}+{prompt} rows ({backend_name}): "
                                       "non-finite output")
            label = f"{decode}" + (f"+{prompt}" if prompt else "")
            out.append({"backend": backend_name, "rows": decode, "prompt_rows": prompt,
                        "label": label, "context": sizes.context, **stats(samples)})
            log(f"model core call, {label:>6} rows, {backend_name:<6}: "
                f"{out[-1]['median_s'] * 1e3:.3f} ms")
            del kv
    return out


def time_runner_steps(model: Any, device: torch.device, sizes: Sizes) -> list[dict[str, Any]]:
    """RECURRENT steps of ``ModelRunner.execute`` with exactly N decode rows (no prompt rows),
    driven by a real ``EngineCore`` (prompts prefilled first, fixed exit at full depth)."""
    max_rows = max(sizes.rows)
    prompt = sizes.runner_prompt
    # Every request is prefilled in one batch, so all N decode together from the first token.
    max_tokens = 3 + math.ceil((sizes.warmup + sizes.repeats) / model.config.total_ut_steps)
    block = 16
    per_req = math.ceil((prompt + max_tokens) / block) * model.config.total_ut_steps
    cfg = make_engine_config(
        model, arm="atomic", max_num_seqs=max_rows, prefill_chunk_size=prompt,
        max_num_batched_tokens=prompt * max_rows, num_blocks=per_req * max_rows + 8,
        block_size=block,
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
        readbacks: list[int] = []
        syncs: list[tuple[int | None, int]] = []  # (syncs torch reported, readbacks) per step
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
                (step_s,), result = timed_once(partial(runner.execute, batch), device)
                samples.append(step_s)
                prepare.append(runner.last_prepare_s)
                readbacks.append(runner.readbacks.last_step)
            elif timed:  # warm-up: also count the host syncs torch sees (CUDA)
                result, n_sync = count_syncs(partial(runner.execute, batch), device)
                syncs.append((n_sync, runner.readbacks.last_step))
            else:
                result = runner.execute(batch)
            now += 1.0
            core.apply(batch, result, now)
            core.pop_finished()
        if len(samples) < max(1, sizes.repeats // 2):
            raise RuntimeError(f"runner timing: only {len(samples)} {n}-row decode steps formed")
        out.append({"rows": n, "context": prompt, **stats(samples),
                    "prepare_median_s": statistics.median(prepare),
                    "backend": runner.backend.name, "readbacks_per_step": sorted(set(readbacks)),
                    "syncs_and_readbacks": syncs})
        log(f"runner RECURRENT step, {n:2d} rows ({runner.backend.name}): "
            f"{out[-1]['median_s'] * 1e3:.3f} ms (host prepare "
            f"{out[-1]['prepare_median_s'] * 1e3:.3f} ms; readbacks per step "
            f"{out[-1]['readbacks_per_step']}; warm-up syncs/readbacks {syncs})")
    return out


def count_syncs(fn: Callable[[], Any], device: torch.device) -> tuple[Any, int | None]:
    """``fn()`` and how many host synchronisations torch's sync debug mode reported in it
    (None off CUDA): the runner's readback count says the same, or a sync is hidden."""
    if device.type != "cuda":
        return fn(), None
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            result = fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return result, sum("synchroniz" in str(w.message) for w in seen)


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
    res["runner"] = time_runner_steps(model, device, sizes)
    return res


