"""The stages that measure the device: ``ceilings`` (copy bandwidth, bf16 matmul),
``pytest`` (``pytest -m gpu``) and ``core`` (core call times against the weight floor), each
through its own subprocess."""

from __future__ import annotations

import importlib.util

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
    per = ", ".join(f"{r['rows']}:{r['median_s'] * 1e3:.3f}" for r in res["model_core"])
    runner = "runner ok" if res.get("runner") else res.get("runner_error", "runner: n/a")
    return f"model core ms by rows {per}; floor {res['floor_s'] * 1e3:.4f} ms; {runner}"
