"""The ``profile`` stage: ``loopserve profile`` over the gpu-check scenario on the device, for
all three arms, with a prompt injected early so mixed steps form within the profiled steps;
on CUDA every profiled step also runs under ``torch.cuda.set_sync_debug_mode``. The
profiler's host syncs must equal the runner's readbacks in every step (the command exits 1
otherwise); profile.json, without the Chrome traces, is kept as profile.json."""

from __future__ import annotations

import json
import shutil

from tools.gpu.context import Check, need_cuda
from tools.gpu.proc import StageFailed, require
from tools.gpu.project_stages import DRY_RUN_SETS, SCENARIO

# Inject one prompt right after the decoders start, so the profiled steps hold mixed steps.
PROFILE_SETS = ("workload.inject=[{at_decode_tokens: 2, prompt_tokens: 384, output_tokens: 4}]",)
DRY_PROFILE_SETS = ("workload.inject=[{at_decode_tokens: 1, prompt_tokens: 64, output_tokens: 2}]",)
STEPS_CUDA, STEPS_DRY = 80, 30


def profile(c: Check, cap: float) -> str:
    need_cuda(c)
    sets = DRY_RUN_SETS + DRY_PROFILE_SETS if c.dry else PROFILE_SETS
    dest = c.scratch / "profile"
    steps = STEPS_DRY if c.dry else STEPS_CUDA
    args = ["profile", SCENARIO, "--target", "cpu" if c.dry else "cuda", "--steps",
            str(steps), "--out", str(dest)] + [a for s in sets for a in ("--set", s)]
    proc = c.loopserve(args, cap - 5)
    doc_path = dest / "profile.json"
    if doc_path.is_file():
        shutil.copy2(doc_path, c.out / "profile.json")
    require(proc, "loopserve profile")
    doc = json.loads(doc_path.read_text())
    arms = doc["arms"]
    c.results["profile"] = {arm: {k: s[k] for k in ("profiler_syncs", "runner_readbacks",
                                                    "num_steps", "num_tokens", "wait_s",
                                                    "per_kind") if k in s}
                            | ({"sync_debug": s["sync_debug"]["syncs"]}
                               if "sync_debug" in s else {})
                            for arm, s in arms.items()}
    if "mixed" not in arms.get("mixed", {}).get("per_kind", {}):
        raise StageFailed(f"no mixed step among the mixed arm's first {steps} steps")
    parts = [f"{arm} {s['profiler_syncs']}/{s['runner_readbacks']}"
             + (f" (sync debug {s['sync_debug']['syncs']})" if "sync_debug" in s else "")
             for arm, s in arms.items()]
    return f"profiler/runner syncs over {steps} steps: " + ", ".join(parts)
