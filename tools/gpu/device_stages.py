"""The stages that measure the device: ``ceilings`` (copy bandwidth, bf16 matmul),
``kernel`` (triton attention against torch_ref and torch's alternatives), ``pytest``
(``pytest -m gpu``), ``core`` (core call times against the weight floor, torch and
triton attention) and ``divergence`` (bf16 A2 against A1 and A0), each through its own
subprocess."""

from __future__ import annotations

import importlib.util
import json

from tools.gpu import outputs
from tools.gpu.context import Check, need_cuda
from tools.gpu.proc import NotAvailable, StageFailed


def ceilings(c: Check, cap: float) -> str:
    """Copy bandwidth and bf16 matmul rate, measured once."""
    need_cuda(c)
    res = c.measure("ceilings", cap)
    c.results["ceilings"] = res
    return (f"copy {res['copy']['tb_per_s']:.3f} TB/s, matmul "
            f"{res['matmul']['tflop_per_s']:.1f} TFLOP/s [{res['timer']}]")


def kernel(c: Check, cap: float) -> str:
    """``python -m kernels.attention.bench`` (bf16 on CUDA; the CPU interpreter, fp16, one
    shape of each kind, in the dry run): max error against torch_ref at Ouro head sizes and
    the timing table."""
    need_cuda(c)
    if importlib.util.find_spec("kernels.attention.bench") is None:
        raise NotAvailable("kernels.attention.bench: not available in this commit")
    dest = c.scratch / "kernel.json"
    args = ["-m", "kernels.attention.bench", "--device", c.device, "--json", str(dest),
            "--budget-s", str(int(cap * 0.6))]
    proc = c.python(args + (["--quick"] if c.dry else []), cap)
    if not dest.is_file():
        raise StageFailed(f"attention bench {proc.describe()}")
    res = json.loads(dest.read_text())
    c.results["kernel"] = res
    shapes = res["shapes"]
    worst = max((s["errors"]["triton_rel"] for s in shapes), default=float("nan"))
    bad = [s["shape"] for s in shapes if not s["ok"]]
    summary = (f"{len(shapes)} shapes, worst rel error {worst:.1e} ({res['dtype']}); triton/floor "
               + ", ".join(f"{s['kind']} {s['shape']}: {s['triton_over_floor']:.2f}"
                           for s in shapes[:3]))
    if bad or proc.rc != 0:
        raise StageFailed(f"{summary}; off the reference: {', '.join(bad) or proc.describe()}")
    return summary


def divergence(c: Check, cap: float) -> str:
    """bf16 greedy A2 against A1 and A0 under concurrent load: the first divergent token and
    exit depth of each pair (divergence is reported, not failed: bf16 near-ties flip)."""
    need_cuda(c)
    if importlib.util.find_spec("engine.model") is None:
        raise NotAvailable("engine.model: not available in this commit")
    res = c.measure("divergence", cap)
    c.results["divergence"] = res
    return "; ".join(
        f"{p['pair']}: {p['requests_differing']}/{res['requests']} differ"
        + (f" (first at output {p['first']['output_index']}: {p['first']['what']})"
           if p["first"] else "")
        for p in res["pairs"]) + f" [{res['attention_backend']}]"


def pytest(c: Check, cap: float) -> str:
    """``pytest -m gpu``, judged from its JUnit report."""
    xml = c.scratch / "pytest-gpu.xml"
    proc = c.python(["-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                     f"--junitxml={xml}"], cap)
    counts = outputs.junit_counts(xml) if xml.is_file() else None
    c.results["pytest"] = {"rc": proc.rc, "counts": counts, "timed_out": proc.timed_out}
    status, detail = outputs.pytest_verdict(proc.rc, counts, cuda=not c.dry,
                                                timed_out=proc.timed_out)
    if status != "ok":
        raise StageFailed(f"{detail}: {proc.tail()}")
    return detail


def core(c: Check, cap: float) -> str:
    """Core call times at 1/8/32 decode rows against the floor from the measured copy rate."""
    need_cuda(c)
    if importlib.util.find_spec("engine.model") is None:
        raise NotAvailable("engine.model: not available in this commit")
    copy = ((c.results.get("ceilings") or {}).get("copy") or {}).get("bytes_per_s")
    extra = ("--copy-bps", repr(copy)) if copy else ()
    res = c.measure("core", cap, extra)
    c.results["core"] = res
    per = ", ".join(f"{r.get('backend', 'torch')} {r.get('label', r['rows'])}: "
                    f"{r['median_s'] * 1e3:.3f}" for r in res["model_core"])
    steps = res.get("runner") or []
    runner = (f"runner ({steps[0]['backend']}) readbacks per step "
              f"{sorted({n for r in steps for n in r['readbacks_per_step']})}"
              if steps else res.get("runner_error", "runner: n/a"))
    return f"model core ms {per}; floor {res['floor_s'] * 1e3:.4f} ms; {runner}"
