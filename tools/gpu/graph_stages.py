"""The stages of the GPU path: ``fa4`` (flash_attn_4 against torch_ref), ``graphs`` (core call
time per configuration against the weight floor), ``graph_tokens`` (graph replay against
eager: identical tokens and exit depths) and ``graph_runs`` (the scenario's A0/A1/A2 with the
fastest configuration validated in this run, beside the eager ``runs``). Each measures in its
own subprocess (``tools.gpu.graph_measure``); all are skipped in the dry run, whose CPU has
neither CUDA graphs nor FA4 (tests/engine/test_runner_graphs.py and
tests/kernels/test_attention_fa4.py cover their host side)."""

from __future__ import annotations

import json
from typing import Any

from tools.gpu import outputs
from tools.gpu.context import Check, need_cuda
from tools.gpu.proc import StageFailed, require

DRY_RUN_REASON = "needs CUDA: CUDA graphs and flash_attn_4 run only on a GPU"
EAGER = "triton"  # what the runs stage ran (attention auto on CUDA)
GRAPH_SETTINGS = {"triton + graphs": ("triton", "mixed"), "flash_attn_4": ("flash_attn_4", "off"),
                  "flash_attn_4 + graphs": ("flash_attn_4", "mixed")}


def _gpu_path(c: Check) -> None:
    need_cuda(c)  # the dry run skips these stages before they start (StageSpec.cuda_only)


def _measure(c: Check, what: str, cap: float, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    dest = c.scratch / f"{what}.json"
    proc = c.python(["-m", "tools.gpu.graph_measure", what, "--device", c.device, "--json",
                     str(dest), *extra], cap)
    require(proc, f"gpu measure {what}")
    return dict(json.loads(dest.read_text()))


def fa4(c: Check, cap: float) -> str:
    """flash_attn_4 against the torch reference (bf16 tolerance) on three batches."""
    _gpu_path(c)
    res = _measure(c, "fa4", cap)
    c.results["fa4"] = res
    detail = ", ".join(f"{s['kind']} {s['rel_error']:.1e}" for s in res["shapes"])
    if not all(s["ok"] for s in res["shapes"]):
        raise StageFailed(f"off torch_ref past {res['tolerance']}: {detail}")
    return f"rel error vs torch_ref {detail}"


def graphs(c: Check, cap: float) -> str:
    """Core call time per configuration and shape against the weight floor."""
    _gpu_path(c)
    copy = ((c.results.get("ceilings") or {}).get("copy") or {}).get("bytes_per_s")
    res = _measure(c, "graphs", cap, ("--copy-bps", repr(copy)) if copy else ())
    c.results["graphs"] = res
    failed = sorted({r["config"] for r in res["rows"]
                     if "error" in r and "not available" not in r["error"]})
    per: dict[str, list[str]] = {}
    for r in res["rows"]:
        if "median_s" in r:
            per.setdefault(r["config"], []).append(f"{r['over_floor']:.1f}")
    detail = "; ".join(f"{k} x floor {'/'.join(v)}" for k, v in per.items())
    if failed:
        raise StageFailed(f"failed: {', '.join(failed)}; {detail}")
    return detail


def graph_tokens(c: Check, cap: float) -> str:
    """Graph replay against eager: identical tokens and exit depths for each backend."""
    _gpu_path(c)
    res = _measure(c, "graph_tokens", cap)
    c.results["graph_tokens"] = res
    notes, bad = [], []
    for backend, entry in res["backends"].items():
        if "error" in entry:
            notes.append(f"{backend}: {entry['error']}")
            if "not available" not in entry["error"]:
                bad.append(backend)
        else:
            notes.append(f"{backend}: {len(entry['requests_differing'])}/{res['requests']} "
                         f"differ")
            if not entry["identical"]:
                bad.append(backend)
    if bad or not any("identical" in e for e in res["backends"].values()):
        raise StageFailed("; ".join(notes))
    return "; ".join(notes)


def validated(results: dict[str, Any]) -> list[str]:
    """The configurations of ``GRAPH_SETTINGS`` whose checks passed in this run."""
    tokens = (results.get("graph_tokens") or {}).get("backends") or {}
    fa4_ok = bool(results.get("fa4")) and all(s["ok"] for s in results["fa4"]["shapes"])
    ok = {"triton + graphs": (tokens.get("triton") or {}).get("identical") is True,
          "flash_attn_4": fa4_ok,
          "flash_attn_4 + graphs": fa4_ok and (tokens.get("flash_attn_4") or {}).get(
              "identical") is True}
    return [name for name, passed in ok.items() if passed]


def fastest(results: dict[str, Any], names: list[str]) -> str | None:
    """The one of ``names`` with the least summed core call time over every shape."""
    rows = (results.get("graphs") or {}).get("rows") or []
    totals = {}
    for name in names:
        times = [r.get("median_s") for r in rows if r["config"] == name]
        if times and all(t is not None for t in times):
            totals[name] = sum(times)
    return min(totals, key=lambda n: totals[n]) if totals else None


def graph_runs(c: Check, cap: float) -> str:
    """The scenario's A0/A1/A2 on the device with the fastest validated configuration."""
    _gpu_path(c)
    from tools.gpu.project_stages import SCENARIO

    best = fastest(c.results, validated(c.results))
    if best is None:
        raise StageFailed("no configuration was validated in this run (fa4, graph_tokens)")
    backend, mode = GRAPH_SETTINGS[best]
    dest = c.scratch / "graph_runs"
    proc = c.loopserve(["run", SCENARIO, "--target", "cuda", "--out", str(dest),
                        "--set", f"runner.attention_backend={backend}",
                        "--set", f"runner.cuda_graphs={mode}"], cap)
    run_dir = outputs.find_run_dir(dest) if dest.is_dir() else None
    if proc.rc != 0 or run_dir is None:
        raise StageFailed(f"{best}: run {proc.describe()}")
    ratios = outputs.a2_a0_ratios(run_dir / "summary.json")
    medians = json.loads((run_dir / "summary.json").read_text()).get("medians")
    c.results["graph_runs"] = {"config": best, "eager": EAGER, "ratios": ratios,
                               "eager_ratios": (c.results.get("ratios") or {}).get("measured"),
                               "medians": medians}
    return (f"{best}: A2/A0 ITL p99 {ratios.get('itl_p99')}, tok/s "
            f"{ratios.get('output_tok_s')} (eager {EAGER} in the runs stage)")
