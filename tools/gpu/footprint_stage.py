"""The ``footprint`` stage: the footprint estimate (``loopserve.plan.footprint``) beside
``torch.cuda.max_memory_allocated`` of the same run, per arm (``tools.gpu.footprint_measure``,
in its own process). Both land in gpu_check.json; the stage fails when an estimate misses the
peak or exceeds the stated multiple of it. Skipped in the dry run: the CPU has no CUDA
allocator to read (tests/engine/test_footprint_peak.py holds the estimate against a CPU
run's resident-set peak)."""

from __future__ import annotations

import json

from tools.gpu.context import Check, need_cuda
from tools.gpu.proc import StageFailed, require

DRY_RUN_REASON = "needs CUDA: torch.cuda.max_memory_allocated reads the CUDA allocator"


def footprint(c: Check, cap: float) -> str:
    need_cuda(c)  # the dry run skips this stage before it starts (StageSpec.cuda_only)
    dest = c.scratch / "footprint.json"
    proc = c.python(["-m", "tools.gpu.footprint_measure", "--device", "cuda", "--json",
                     str(dest)], cap)
    require(proc, "gpu measure footprint")
    res = json.loads(dest.read_text())
    c.results["footprint"] = res
    gib = 2.0**30
    parts = [f"{arm} {a['estimate_bytes'] / gib:.2f}/{a['max_memory_allocated_bytes'] / gib:.2f}"
             f" GiB (x{a['estimate_over_peak']})" for arm, a in res["arms"].items()]
    detail = "estimate/peak " + ", ".join(parts)
    if not all(a["ok"] for a in res["arms"].values()):
        raise StageFailed(f"estimate outside [peak, {res['multiple']} x peak]: {detail}")
    return detail
