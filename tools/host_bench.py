"""Host time per core call of the real engine, no kernel time: ``python -m tools.host_bench``
(also part of ``make bench``).

The ``tiny`` model on the CPU, the mixed arm at fixed depth, ``rows`` decode requests past
their prompts of ``context`` tokens: per decode core call, the median host time of
``EngineCore.schedule`` and of the runner's metadata (``_prepare_batch``: per-row slots,
the block-table updates and the one upload, without the backend's own ``prepare``), then
the backends' ``prepare`` on that same metadata: ``torch`` (the reference's gathers, which
run kernels) and ``triton`` (host planning and one upload: the CUDA path). ``total`` is
schedule + metadata + triton prepare, the host work a CUDA core call waits on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from typing import Any

if "TRITON_INTERPRET" not in os.environ:  # the triton backend's prepare on the CPU
    os.environ["TRITON_INTERPRET"] = "1"

import torch

from engine.core import ExitConfig, SamplingParams
from engine.core.request import Stage
from engine.llm import LLM
from kernels.attention import AttentionMetadata

TARGET_US_AT_16 = 150.0
ROWS = (1, 8, 16, 64)


def measure(rows: int, context: int, steps: int) -> dict[str, Any]:
    """Medians in microseconds per core call over ``steps`` decode steps."""
    torch.set_num_threads(1)
    chunk = 256
    # Long enough that the first requests still decode when the last prompt is in.
    tokens = rows * 4 * -(-context // chunk) + steps + 8
    llm = LLM("tiny", arm="mixed", exit=ExitConfig(mode="fixed"), max_num_seqs=rows,
              max_num_batched_tokens=chunk + rows, prefill_chunk_size=chunk,
              num_blocks=rows * 4 * (-(-(context + tokens) // 16) + 1), block_size=16)
    runner = llm.runner
    triton = _triton_like(runner.backend)
    torch_prepare = runner.backend.prepare
    spent: dict[str, float] = {}

    def prepare(meta: AttentionMetadata) -> None:
        t0 = time.perf_counter()
        torch_prepare(meta)
        t1 = time.perf_counter()
        if triton is not None:
            triton.prepare(dataclasses.replace(meta, backend_state=None))
        t2 = time.perf_counter()
        spent.update(torch=t1 - t0, triton=t2 - t1, wrapper=time.perf_counter() - t0)

    runner.backend.prepare = prepare  # type: ignore[method-assign]
    for i in range(rows):
        llm.add_request([(7 * i + j) % 64 for j in range(context)],
                        SamplingParams(max_tokens=tokens, ignore_eos=True))
    cols: dict[str, list[float]] = {k: [] for k in ("schedule", "metadata", "torch", "triton")}
    while llm.core.has_work() and len(cols["schedule"]) < steps:
        t0 = time.perf_counter()
        batch = llm.core.schedule(llm._now())
        sched = time.perf_counter() - t0
        assert batch is not None
        result = runner.execute(batch)
        llm.core.apply(batch, result, llm._now())
        if batch.stage is Stage.RECURRENT and batch.num_decode_items == rows \
                and not batch.num_prompt_items and batch.num_core_calls == 1:
            cols["schedule"].append(sched)
            cols["metadata"].append(runner.last_prepare_s - spent["wrapper"])
            cols["torch"].append(spent["torch"])
            cols["triton"].append(spent["triton"])
        llm.core.pop_finished()
    if not cols["schedule"]:
        raise RuntimeError(f"{rows} rows at context {context}: no step decoded every row")
    out: dict[str, Any] = {"rows": rows, "context": context, "steps": len(cols["schedule"])}
    for k, v in cols.items():
        out[k + "_us"] = statistics.median(v) * 1e6
    backend = out["triton_us"] if triton is not None else out["torch_us"]
    out["total_us"] = out["schedule_us"] + out["metadata_us"] + backend
    return out


def _triton_like(backend: Any) -> Any:
    """A configured triton backend beside the runner's (None in a tree without one)."""
    try:
        from kernels.attention.triton_backend import TritonBackend
    except ImportError:
        return None
    triton = TritonBackend()
    triton.configure(backend.shape)
    return triton


def fastest(rows: int, context: int, steps: int, repeats: int) -> dict[str, Any]:
    """The repeat with the least total (a shared machine only ever adds time)."""
    return min((measure(rows, context, steps) for _ in range(repeats)),
               key=lambda r: float(r["total_us"]))


def run(contexts: tuple[int, ...] = (128, 768), steps: int = 200, repeats: int = 3
        ) -> list[dict[str, Any]]:
    """Every row count at every context, printed as a table."""
    print("host time per decode core call, us (tiny model, CPU; medians of "
          f"{steps} steps, the fastest of {repeats} runs; total = schedule + metadata + "
          "triton prepare)")
    print(f"{'rows':>5} {'context':>8} {'schedule':>9} {'metadata':>9} {'torch prep':>10} "
          f"{'triton prep':>11} {'total':>8}")
    results = []
    for context in contexts:
        for rows in ROWS:
            r = fastest(rows, context, steps, repeats)
            results.append(r)
            print(f"{rows:>5} {context:>8} {r['schedule_us']:>9.1f} {r['metadata_us']:>9.1f} "
                  f"{r['torch_us']:>10.1f} {r.get('triton_us', 0.0):>11.1f} "
                  f"{r['total_us']:>8.1f}",
                  flush=True)
    at16 = max(r["total_us"] for r in results if r["rows"] == 16)
    verdict = "met" if at16 <= TARGET_US_AT_16 else "MISSED"
    print(f"16 rows: {at16:.1f} us per core call; target {TARGET_US_AT_16:.0f} us: {verdict}")
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.host_bench", description=__doc__)
    ap.add_argument("--contexts", type=int, nargs="+", default=[128, 768],
                    help="prompt lengths (the tiny model holds 1024 positions)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3, help="runs per point; the fastest counts")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.repeats < 1 or min(args.contexts) < 1:
        ap.error("--steps, --repeats and --contexts must be >= 1")
    results = run(tuple(args.contexts), args.steps, args.repeats)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
