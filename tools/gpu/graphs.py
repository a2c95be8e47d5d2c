"""Device measurements of the GPU path (``python -m tools.gpu.graph_measure``), each run in its
own process by the stages of ``tools.gpu.graph_stages``:

- ``graphs``: ``model.recurrent`` core call time at 1, 8, 32 decode rows and 8 decode + a
  prompt chunk, per configuration (torch eager, triton eager, triton with CUDA graphs,
  flash_attn_4 eager and with graphs), against the weight floor. A graph call goes through
  ``engine.graphs.CallGraphs`` as the runner does (static-buffer fill, replay, real rows
  copied out). A configuration that fails is recorded with its error; the rest still run.
  On the CPU (tests) graphs replay with ``eager_capture``: the same path, no recording.
- ``graph_tokens``: bf16 generation with random weights (a gate that varies) in the mixed
  arm, eager against ``cuda_graphs: mixed`` for each backend: tokens and exit depths must be
  identical (same kernels, same inputs).
- ``fa4``: flash_attn_4 against the torch reference on decode, prompt and mixed batches at
  Ouro-1.4B head sizes (bf16 tolerance).
"""

from __future__ import annotations

from typing import Any

import torch

from engine.call_metadata import PreparedCall
from engine.core import ExitConfig
from engine.graphs import CallGraphs, StaticCall, capture_sizes, cuda_capture, eager_capture
from engine.llm import LLM
from engine.runner import ModelRunner
from kernels.attention import AttentionShape, available_backends, get_backend
from kernels.attention.cases import make_case
from tools.gpu.core import core_shapes, random_model, stack_bytes
from tools.gpu.divergence import gated_workload
from tools.gpu.sizes import NOMINAL_COPY_BPS, Sizes
from tools.gpu.timing import log, stats, time_repeats, timer_name

CONFIGS = (("torch", False), ("triton", False), ("triton", True), ("flash_attn_4", False),
           ("flash_attn_4", True))
FA4_TOLERANCE = 1e-2  # relative to the reference's largest magnitude (bf16)


def config_name(backend: str, graphs: bool) -> str:
    return backend + (" + graphs" if graphs else "")


def _call(model: Any, device: torch.device, sizes: Sizes, backend_name: str, graphs: bool,
          decode: int, prompt: int) -> tuple[Any, dict[str, int]]:
    """A timed core call of one shape (every sequence at ``sizes.context`` positions) and the
    graphs' counters (empty when eager)."""
    cfg = model.config
    dtype = next(model.parameters()).dtype
    shape = AttentionShape(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, dtype)
    backend = get_backend(backend_name, shape)
    case = make_case([sizes.context] * decode, [(sizes.context, prompt)] if prompt else [],
                     num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads,
                     head_dim=shape.head_dim, block_size=16, dtype=dtype, device=device)
    dims = (case.k_cache.shape[0] + 1, *case.k_cache.shape[1:])  # + the padding rows' block
    kv = [(torch.randn(dims, device=device, dtype=dtype),
           torch.randn(dims, device=device, dtype=dtype)) for _ in range(cfg.num_hidden_layers)]
    meta = case.meta
    hidden = torch.randn(meta.num_rows, cfg.hidden_size, device=device, dtype=dtype)
    positions = torch.tensor([sizes.context - 1] * decode
                             + list(range(sizes.context - prompt, sizes.context)), device=device)
    if not graphs:
        def eager() -> torch.Tensor:
            backend.prepare(meta)
            y: torch.Tensor = model.recurrent(hidden, positions, kv, meta, backend)
            return y
        return eager, {}
    bucket_sizes = capture_sizes(decode + prompt)
    static = StaticCall(bucket_sizes[-1], cfg.hidden_size, dims[0] - 1, 16, device, dtype)

    def forward(h: torch.Tensor, p: torch.Tensor, m: Any) -> torch.Tensor:
        y: torch.Tensor = model.recurrent(h, p, kv, m, backend)
        return y

    capture = cuda_capture() if device.type == "cuda" else eager_capture
    call_graphs = CallGraphs("mixed", bucket_sizes, static, backend, forward, capture)
    prep = PreparedCall(positions, meta, [])
    return (lambda: call_graphs.call(prep, hidden)), call_graphs.stats


def graph_core(device: torch.device, sizes: Sizes, copy_bps: float | None) -> dict[str, Any]:
    """Every configuration at every shape against the weight floor."""
    bw = copy_bps or NOMINAL_COPY_BPS[device.type]
    model = random_model(sizes.model, device, sizes.model_dtype)
    floor = stack_bytes(model) / bw
    here = set(available_backends())
    rows: list[dict[str, Any]] = []
    for backend, graphs in CONFIGS:
        name = config_name(backend, graphs)
        for decode, prompt in core_shapes(sizes):
            label = f"{decode}" + (f"+{prompt}" if prompt else "")
            row: dict[str, Any] = {"config": name, "backend": backend, "graphs": graphs,
                                   "label": label}
            rows.append(row)
            if backend not in here:
                row["error"] = f"{backend} is not available here"
                continue
            try:
                with torch.inference_mode():
                    call, counters = _call(model, device, sizes, backend, graphs, decode, prompt)
                    samples = time_repeats(call, device, warmup=sizes.warmup,
                                           repeats=sizes.repeats)
                    if not torch.isfinite(call()).all():
                        raise RuntimeError("non-finite output")
                if graphs and not counters.get("capture"):
                    raise RuntimeError(f"nothing was captured: {counters}")
                row.update(stats(samples), over_floor=stats(samples)["median_s"] / floor,
                           graph_counters=dict(counters))
                log(f"{name:<22} {label:>6} rows: {row['median_s'] * 1e3:.3f} ms "
                    f"({row['over_floor']:.2f}x floor)")
            except Exception as err:  # noqa: BLE001 - one configuration's failure is data
                row["error"] = f"{type(err).__name__}: {str(err)[:200]}"
                log(f"{name:<22} {label:>6} rows: FAILED {row['error']}")
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return {"model": sizes.model, "dtype": str(sizes.model_dtype).removeprefix("torch."),
            "timer": timer_name(device), "floor_s": floor, "copy_bytes_per_s": bw,
            "context": sizes.context, "rows": rows}


def graph_tokens(device: torch.device, sizes: Sizes) -> dict[str, Any]:
    """Eager against ``cuda_graphs: mixed`` in the mixed arm, per backend that runs here."""
    dtype = sizes.model_dtype
    model, prompts, params = gated_workload(device, sizes, dtype)
    kw: dict[str, Any] = dict(
        arm="mixed", device=device, dtype=dtype, exit=ExitConfig(mode="ouro", exit_threshold=0.5),
        max_num_seqs=sizes.div_requests, max_num_batched_tokens=256, prefill_chunk_size=128,
        block_size=16,
        num_blocks=sizes.div_requests * 4 * (-(-(sizes.div_prompt + sizes.div_tokens) // 16) + 1))
    out: dict[str, Any] = {"requests": len(prompts), "max_tokens": sizes.div_tokens,
                           "backends": {}}
    for backend in ("triton", "flash_attn_4"):
        entry: dict[str, Any] = out["backends"].setdefault(backend, {})
        if backend not in available_backends():
            entry["error"] = f"{backend} is not available here"
            continue
        try:
            runs = {}
            for mode in ("off", "mixed"):
                llm = LLM(model, attention_backend=backend, **kw)
                if mode != "off":  # on the CPU (tests) the graph path replays eagerly
                    llm.runner = ModelRunner(
                        model, llm.cfg, None, device, dtype, backend, cuda_graphs=mode,
                        graph_capture=None if device.type == "cuda" else eager_capture)
                    llm.runner.bind(llm.core)
                runs[mode] = [(o.output_token_ids, o.exit_depths)
                              for o in llm.generate(prompts, params)]
                graphs = llm.runner.graphs
                if graphs is not None:
                    entry["graph_counters"] = dict(graphs.stats)
            differ = [i for i, (a, b) in enumerate(zip(runs["off"], runs["mixed"], strict=True))
                      if a != b]
            entry.update(identical=not differ, requests_differing=differ,
                         exit_depths_seen=sorted({d for _, ds in runs["off"] for d in ds}))
            log(f"graph replay vs eager ({backend}): {len(differ)} of {len(prompts)} differ; "
                f"graphs {entry.get('graph_counters')}")
        except Exception as err:  # noqa: BLE001 - reported per backend
            entry["error"] = f"{type(err).__name__}: {str(err)[:200]}"
            log(f"graph replay vs eager ({backend}): FAILED {entry['error']}")
    return out


def fa4_check(device: torch.device) -> dict[str, Any]:
    """flash_attn_4 against torch_ref (bf16 inputs, fp32 reference) on three batches."""
    shapes = {"decode": ([512] * 8, []), "prompt": ([], [(512, 128), (128, 128)]),
              "mixed": ([512] * 8, [(512, 128)])}
    out: dict[str, Any] = {"tolerance": FA4_TOLERANCE, "shapes": []}
    for kind, (decode, prompts) in shapes.items():
        case = make_case(decode, prompts, num_heads=16, num_kv_heads=16, head_dim=128,
                         block_size=16, dtype=torch.bfloat16, device=device)
        results = {}
        for name in ("torch", "flash_attn_4"):
            backend = get_backend(name, case.shape)
            backend.prepare(case.meta)
            k, v = case.caches()
            results[name] = backend.forward(case.q, case.k, case.v, k, v, case.meta, 0.088)
        ref = results["torch"].float()
        rel = float((results["flash_attn_4"].float() - ref).abs().max() / ref.abs().max())
        out["shapes"].append({"kind": kind, "rel_error": rel, "ok": rel <= FA4_TOLERANCE})
        log(f"fa4 vs torch_ref, {kind}: rel error {rel:.2e}")
    return out
