"""Timing of the attention backends: ``python -m kernels.attention.bench --device cuda|cpu``.

At Ouro-1.4B head sizes (16 query and 16 KV heads of 128, 16-token blocks) and decode-only,
prompt-only and mixed shapes, each backend's ``attend`` time (per layer, KV write excluded)
against the KV-bytes floor (K/V bytes read plus Q/O bytes, over the device copy bandwidth
measured here) and against torch's fastest alternative (SDPA over gathered KV; compiled
``flex_attention`` with a block mask where it runs, by default on the mixed shapes only:
it compiles per shape). Also the KV write (Triton kernel against two ``index_copy_``) and
the triton output's error against ``torch_ref`` (fp32). CUDA times are
``triton.testing.do_bench`` medians (it flushes L2 between runs); CPU times are
``perf_counter`` medians of the Triton interpreter, which check plumbing, not speed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

SHAPES: list[tuple[str, str, list[int], list[tuple[int, int]]]] = [
    ("decode", "1 x 4096", [4096], []),
    ("decode", "8 x 1024", [1024] * 8, []),
    ("decode", "8 x 4096", [4096] * 8, []),
    ("decode", "32 x 1024", [1024] * 32, []),
    ("decode", "64 x 512", [512] * 64, []),
    ("prompt", "128 @ 896", [], [(1024, 128)]),
    ("prompt", "512 @ 0", [], [(512, 512)]),
    ("prompt", "2 x 256 @ 1792", [], [(2048, 256)] * 2),
    ("mixed", "8 x 512 + 128 @ 384", [512] * 8, [(512, 128)]),
    ("mixed", "16 x 1024 + 256 @ 0", [1024] * 16, [(256, 256)]),
    ("mixed", "32 x 2048 + 2 x 64", [2048] * 32, [(1024, 64), (512, 64)]),
]
OURO = dict(num_heads=16, num_kv_heads=16, head_dim=128, block_size=16)
KV_WRITE_ROWS = (8, 64, 512, 2048)
QUICK = ("8 x 1024", "128 @ 896", "8 x 512 + 128 @ 384")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m kernels.attention.bench", description=__doc__)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default=None,
                    help="default bfloat16 on cuda, float16 on cpu (the interpreter)")
    ap.add_argument("--context-scale", type=float, default=None,
                    help="multiply every length by this (default 1 on cuda, 1/64 on cpu)")
    ap.add_argument("--flex", choices=("mixed", "all", "none"), default=None,
                    help="shapes that also time compiled flex_attention (default mixed on "
                         "cuda, none on cpu: it compiles for about a minute there)")
    ap.add_argument("--only", choices=("decode", "prompt", "mixed"), action="append",
                    help="shape kinds to run (repeatable; default all)")
    ap.add_argument("--quick", action="store_true",
                    help="one shape of each kind and one KV write size (the dry run)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no shape after this many seconds (flex only in the first half)")
    ap.add_argument("--json", type=Path, help="write every number here")
    args = ap.parse_args(argv)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device here; use --device cpu")
    if not cuda and os.environ.get("TRITON_INTERPRET") != "1":
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernel module is imported
    args.dtype = args.dtype or ("bfloat16" if cuda else "float16")
    args.context_scale = args.context_scale or (1.0 if cuda else 1 / 64)
    args.flex = args.flex or ("mixed" if cuda else "none")
    return args


def _timer(device: torch.device, quick: bool = False) -> Callable[[Callable[[], Any]], float]:
    """Median seconds of one call (``quick`` on the CPU: one call, the dry run's)."""
    if device.type == "cuda":
        import triton.testing

        def cuda_time(fn: Callable[[], Any]) -> float:
            return float(triton.testing.do_bench(fn, warmup=10, rep=40,
                                                 return_mode="median")) / 1e3
        return cuda_time

    def cpu_time(fn: Callable[[], Any]) -> float:
        if not quick:
            fn()  # the interpreter is slow: one warm call, then the better of two
        times = []
        for _ in range(1 if quick else 2):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)
    return cpu_time


def copy_bandwidth(device: torch.device, timer: Callable[[Callable[[], Any]], float]) -> float:
    """Bytes per second of a device-to-device copy (bytes read plus bytes written)."""
    n = (1 << 30 if device.type == "cuda" else 64 << 20) // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / timer(lambda: dst.copy_(src))


def _scaled(n: int, scale: float) -> int:
    return max(1, round(n * scale))


def bench_shape(kind: str, label: str, decode: list[int], prompts: list[tuple[int, int]],
                args: argparse.Namespace, bw: float,
                timer: Callable[[Callable[[], Any]], float]) -> dict[str, Any]:
    from kernels.attention import alternatives, get_backend
    from kernels.attention.cases import make_case
    from kernels.attention.triton_backend import TritonBackend
    from kernels.attention.triton_plan import SPLIT_KEYS, SplitPolicy

    s = args.context_scale
    decode = [_scaled(c, s) for c in decode]
    prompts = [(_scaled(c, s), min(_scaled(c, s), _scaled(n, s))) for c, n in prompts]
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    case = make_case(decode, prompts, dtype=dtype, device=device, **OURO)
    scale = 1 / math.sqrt(OURO["head_dim"])
    q, meta = case.q, case.meta
    k_cache, v_cache = case.caches()
    times: dict[str, float | None] = {}
    ref = get_backend("torch")
    ref.prepare(meta)
    want = ref.attend(q, k_cache, v_cache, meta, scale)
    times["torch_ref"] = timer(lambda: ref.attend(q, k_cache, v_cache, meta, scale))
    sdpa = alternatives.sdpa(meta, scale)
    times["sdpa"] = timer(lambda: sdpa(q, k_cache, v_cache))
    times["flex"] = None
    if args.flex == "all" or args.flex == kind:
        try:
            fx = alternatives.flex(meta, scale, OURO["num_heads"], OURO["num_kv_heads"])
            times["flex"] = timer(lambda: fx(q, k_cache, v_cache))
        except Exception as err:  # noqa: BLE001 - "where it runs": a failure is a blank cell
            print(f"  flex_attention failed on {label}: {type(err).__name__}: {err}"[:300])
    errors: dict[str, float] = {}
    for name, policy in (("triton", SplitPolicy(SPLIT_KEYS)),
                         ("triton_nosplit", SplitPolicy())):
        tri = TritonBackend(split=policy)
        tri.configure(case.shape)
        tri_meta = meta_copy(meta)
        tri.prepare(tri_meta)
        got = tri.attend(q, k_cache, v_cache, tri_meta, scale)
        diff = (got.float() - want.float())
        errors[name] = float(diff.abs().max())
        errors[name + "_rel"] = float(diff.norm() / want.float().norm())
        times[name] = timer(lambda tri=tri, m=tri_meta: tri.attend(q, k_cache, v_cache, m, scale))
    floor = (case.kv_bytes_read + case.qo_bytes) / bw
    torch_best = min(t for n, t in times.items() if n in ("sdpa", "flex") and t is not None)
    return {"kind": kind, "shape": label, "decode": decode, "prompts": prompts,
            "rows": meta.num_rows, "kv_bytes": case.kv_bytes_read, "floor_s": floor,
            "times_s": times, "triton_over_floor": times["triton"] / floor,
            "triton_over_torch_best": times["triton"] / torch_best, "errors": errors}


def meta_copy(meta: Any) -> Any:
    """The same metadata with its own backend_state slot."""
    from dataclasses import replace

    return replace(meta, backend_state=None)


def bench_kv_write(args: argparse.Namespace,
                   timer: Callable[[Callable[[], Any]], float]) -> list[dict[str, Any]]:
    from kernels.attention.cases import make_case
    from kernels.attention.triton_backend import TritonBackend

    rows_list = KV_WRITE_ROWS[:1] if args.quick else (
        KV_WRITE_ROWS if args.device == "cuda" else KV_WRITE_ROWS[:2])
    out = []
    for rows in rows_list:
        case = make_case([], [(rows, rows)], dtype=getattr(torch, args.dtype),
                         device=args.device, **OURO)
        kc, vc = case.caches()
        res: dict[str, Any] = {"rows": rows}
        for mode in ("index_copy", "triton"):
            be = TritonBackend(kv_write=mode)
            res[mode + "_s"] = timer(
                lambda be=be, c=case, kc=kc, vc=vc: be.write_kv(c.k, c.v, kc, vc, c.meta))
        out.append(res)
    return out


def _us(t: float | None) -> str:
    return f"{t * 1e6:9.1f}" if t is not None else f"{'-':>9}"


TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}  # ||err|| / ||ref||


def main(argv: list[str] | None = None) -> int:
    """The table; exit 1 when a triton output is off the reference (beyond TOLERANCE)."""
    args = _parse(argv)
    started = time.monotonic()
    device = torch.device(args.device)
    timer = _timer(device, args.quick)
    bw = copy_bandwidth(device, timer)
    name = torch.cuda.get_device_name(device) if args.device == "cuda" else \
        "cpu, Triton interpreter"
    print(f"device {args.device} ({name}), {args.dtype}, lengths x{args.context_scale:g}, "
          f"copy bandwidth {bw / 1e9:.1f} GB/s; times in us per layer")
    cols = ("torch_ref", "sdpa", "flex", "triton", "triton_nosplit")
    print(f"{'kind':<7} {'shape':<22} {'rows':>5} {'floor':>9} "
          + " ".join(f"{c:>9}"[:9] for c in cols)
          + f" {'tri/floor':>9} {'tri/torch':>9} {'rel err':>8}")
    doc: dict[str, Any] = {"device": args.device, "gpu": name, "dtype": args.dtype,
                           "context_scale": args.context_scale, "copy_bandwidth_Bps": bw,
                           "tolerance": TOLERANCE[args.dtype], "shapes": [], "kv_write": []}
    for kind, label, decode, prompts in SHAPES:
        if (args.only and kind not in args.only) or (args.quick and label not in QUICK):
            continue
        if args.budget_s and time.monotonic() - started > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s spent: {label} and later shapes skipped")
            break
        if args.budget_s and time.monotonic() - started > args.budget_s / 2:
            args.flex = "none"  # compiling flex per shape would eat the rest
        r = bench_shape(kind, label, decode, prompts, args, bw, timer)
        r["ok"] = all(r["errors"][n + "_rel"] <= TOLERANCE[args.dtype]
                      for n in ("triton", "triton_nosplit"))
        doc["shapes"].append(r)
        t = r["times_s"]
        print(f"{kind:<7} {label:<22} {r['rows']:>5} {_us(r['floor_s'])} "
              + " ".join(_us(t[c]) for c in cols)
              + f" {r['triton_over_floor']:>9.2f} {r['triton_over_torch_best']:>9.2f}"
              f" {r['errors']['triton_rel']:>8.1e}{'' if r['ok'] else ' OFF'}", flush=True)
        _write(args.json, doc)  # what is done survives a kill at the stage's cap
    doc["kv_write"] = bench_kv_write(args, timer)
    print("KV write, us per layer: " + "; ".join(
        f"{w['rows']} rows: index_copy {w['index_copy_s'] * 1e6:.1f}, triton "
        f"{w['triton_s'] * 1e6:.1f}" for w in doc["kv_write"]))
    _write(args.json, doc)
    bad = [r["shape"] for r in doc["shapes"] if not r["ok"]]
    if bad:
        print(f"triton differs from torch_ref beyond {TOLERANCE[args.dtype]:g}: {', '.join(bad)}")
    return 1 if bad else 0


def _write(path: Path | None, doc: dict[str, Any]) -> None:
    if path is not None:
        path.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
