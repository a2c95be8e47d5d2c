"""Compile the Triton kernels for a GPU that is not here (sm_90: H100/H200), and read the
compiler's resource report: ``python -m kernels.attention.triton_aot``.

Triton's wheel carries ptxas and cuobjdump, so a CPU machine can build the cubin the GPU
would run, with the specialisation the JIT would give it (16-byte-aligned pointers, strides
divisible by 16, except the arguments the kernels exempt), and say how many registers each
variant takes, whether it spills (stack and local loads/stores), and which instructions it
uses (HMMA/HGMMA tensor-core ops; the widths of its global loads). Needs TRITON_INTERPRET
unset (the JIT, not the interpreter).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels.attention.triton_plan import MAX_SPLITS

_PTR = {"bfloat16": "*bf16", "float16": "*fp16", "float32": "*fp32"}


@dataclass(frozen=True)
class Variant:
    """One compiled configuration of the attention kernel."""

    dtype: str = "bfloat16"
    head_dim: int = 128
    group: int = 1
    block_m: int = 16
    block_size: int = 16
    tile_n: int = 64

    @property
    def label(self) -> str:
        return (f"{self.dtype} D={self.head_dim} G={self.group} M={self.block_m} "
                f"page={self.block_size} N={self.tile_n}")


def _attrs(fn: Any, signature: dict[str, str]) -> dict[tuple[int, ...], list[list[Any]]]:
    """The divisibility hints the JIT would give this launch."""
    names = fn.arg_names
    skip_align = set(getattr(fn, "do_not_specialize_on_alignment", []) or [])
    skip_value = set(getattr(fn, "do_not_specialize", []) or [])
    out = {}
    for name, kind in signature.items():
        if kind == "constexpr" or kind.startswith("fp"):
            continue
        if (kind.startswith("*") and name in skip_align) or (
                not kind.startswith("*") and name in skip_value):
            continue
        out[(names.index(name),)] = [["tt.divisibility", 16]]
    return out


def compile_attention(v: Variant, *, arch: int = 90, num_warps: int | None = None,
                      num_stages: int | None = None) -> dict[str, Any]:
    """Build one variant for ``sm_<arch>``; its resource use and instruction counts."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernels.attention import triton_paged as tp

    fn = tp._paged_attention_kernel
    if tp.interpreted():
        raise RuntimeError("unset TRITON_INTERPRET: the interpreter compiles nothing")
    const = dict(BLOCK_SIZE=v.block_size, GROUP=v.group, BLOCK_M=v.block_m,
                 HEAD_DIM=v.head_dim, TILE_N=v.tile_n, IEEE=v.dtype == "float32")
    ptr = _PTR[v.dtype]
    kinds = {"Q": ptr, "K": ptr, "V": ptr, "OUT": ptr, "BT": "*i64", "CTX": "*i64", "WORK": "*i64",
             "PART_ACC": "*fp32", "PART_M": "*fp32", "PART_L": "*fp32", "qk_scale": "fp32"}
    sig = {n: "constexpr" if n in const else kinds.get(n, "i64") for n in fn.arg_names}
    src = ASTSource(fn=fn, signature=sig, constexprs=const, attrs=_attrs(fn, sig))
    warps = num_warps or tp._num_warps(v.block_m, v.head_dim)
    num_stages = num_stages or tp.NUM_STAGES
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                            options={"num_warps": warps, "num_stages": num_stages})
    res = resources(kernel.asm["cubin"])
    res["shared_bytes"] = max(res["shared_bytes"], int(kernel.metadata.shared))  # dynamic
    return {"variant": v.label, "num_warps": warps, "num_stages": num_stages, **res}


def compile_helpers(dtype: str = "bfloat16", head_dim: int = 128, kv_row: int = 2048,
                    *, arch: int = 90) -> dict[str, Any]:
    """Build the combine and KV-write kernels; their resource use."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernels.attention import triton_paged as tp

    ptr = _PTR[dtype]
    out: dict[str, Any] = {}
    specs = {
        "combine": (tp._combine_kernel, {"OUT": ptr, "PART_ACC": "*fp32", "PART_M": "*fp32",
                                         "PART_L": "*fp32"},
                    {"HEAD_DIM": head_dim, "MAX_SPLITS": MAX_SPLITS}),
        "write_kv": (tp._write_kv_kernel, {"K": ptr, "V": ptr, "KC": ptr, "VC": ptr,
                                           "SLOT": "*i64"},
                     {"ROW": kv_row, "BLOCK": min(triton.next_power_of_2(kv_row), 4096)}),
    }
    for name, (fn, kinds, const) in specs.items():
        sig = {n: "constexpr" if n in const else kinds.get(n, "i64") for n in fn.arg_names}
        src = ASTSource(fn=fn, signature=sig, constexprs=const, attrs=_attrs(fn, sig))
        kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                                options={"num_warps": 4})
        out[name] = resources(kernel.asm["cubin"])
    return out


def resources(cubin: bytes) -> dict[str, Any]:
    """Registers, stack, shared memory and instruction counts of a cubin (cuobjdump)."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True,
                               text=True, check=True).stdout
        sass = subprocess.run([str(tool), "-sass", f.name], capture_output=True, text=True,
                              check=True).stdout
    fields = dict(re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", usage))
    ops = collections.Counter(re.findall(
        r"\b(HGMMA|HMMA|LDL|STL|LDGSTS(?:\.\w+)*|LDG\.E(?:\.\w+)*|LDS(?:\.\w+)*"
        r"|STG\.E(?:\.\w+)*)\b", sass))
    return {"registers": int(fields.get("REG", 0)), "stack_bytes": int(fields.get("STACK", 0)),
            "shared_bytes": int(fields.get("SHARED", 0)), "ops": dict(sorted(ops.items()))}


DEFAULT = [
    Variant(),
    Variant(block_m=64),
    Variant(dtype="float16"),
    Variant(dtype="float32"),
    Variant(head_dim=256, tile_n=32),
    Variant(head_dim=8, group=2),
    Variant(head_dim=64, group=4, block_size=4),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernels.attention.triton_aot",
                                 description=__doc__)
    ap.add_argument("--arch", type=int, default=90, help="compute capability x10 (90: Hopper)")
    ap.add_argument("--quick", action="store_true", help="the first variant only")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        ap.error("unset TRITON_INTERPRET first (the interpreter compiles nothing)")
    import triton

    print(f"triton {triton.__version__}, sm_{args.arch}")
    for v in DEFAULT[:1] if args.quick else DEFAULT:
        r = compile_attention(v, arch=args.arch)
        loads = {k: n for k, n in r["ops"].items() if k.startswith("LDG")}
        print(f"{r['variant']:<44} warps {r['num_warps']} regs {r['registers']:>3} stack "
              f"{r['stack_bytes']:>4} smem {r['shared_bytes']:>6} mma "
              f"{r['ops'].get('HGMMA', 0) + r['ops'].get('HMMA', 0):>3} spill ld/st "
              f"{r['ops'].get('LDL', 0)}/{r['ops'].get('STL', 0)} global loads {loads}",
              flush=True)
    for name, r in compile_helpers(arch=args.arch).items():
        print(f"{name:<44} regs {r['registers']:>3} stack {r['stack_bytes']:>4} ops {r['ops']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
