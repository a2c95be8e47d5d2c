"""The RFC §6 end-to-end check: every arm through ``loopserve serve``, beside the simulation.

For each arm of the scenario: start ``loopserve serve`` as a subprocess with the scenario's
engine settings for that arm, wait for ``/health``, warm it up when ``runner.warmup`` asks
(two short requests, not measured), replay the scenario's ShareGPT prompts on the same seeded
arrival schedule through the ``bench serve`` client, read the core and mixed core calls the
replay added from ``/metrics``, stop the server with SIGTERM. A scenario with
``cluster: {replicas: N, router: round_robin}`` starts N servers per arm (each one replica)
and sends request ``i`` to server ``i mod N``, as the simulated round-robin router does.
Then the same requests (token lengths from the served model's tokenizer, the same arrival
times, the server's cache size) run in the simulator as a trace workload. Both worlds'
metrics come from the one vLLM result writer (``loopserve.outputs.vllm_results``): the
client's on the client's clock, the simulation's on simulated time from each request's
arrival.

Writes ``scenario.yaml``, ``requests.jsonl``, ``client-<arm>.json`` (the vLLM result file),
``server-<arm>.log`` (``server-<arm>-<i>.log`` per replica), ``e2e.json`` and ``report.md``
into one folder, staged and renamed.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.core.records import RunRecords
from engine.tokenizer import load_tokenizer
from loopserve.bench import client
from loopserve.bench.datasets import SampleRequest, arrival_offsets, sample_sharegpt
from loopserve.bench.e2e_report import report_markdown
from loopserve.bench.process import ServerProcess
from loopserve.errors import UserError
from loopserve.outputs.files import atomic_write, run_destination, staged_dir, write_scenario
from loopserve.outputs.vllm_results import METRICS, outcomes_from_records, vllm_results
from loopserve.plan import plan_runs
from loopserve.runs import interrupts
from loopserve.runs.loop import execute
from loopserve.schema import load_scenario
from loopserve.schema.build import model_shape
from loopserve.schema.load import validate
from loopserve.schema.scenario import Scenario
from loopserve.workloads.sharegpt import ShareGPTWorkload

PERCENTILES = (50.0, 90.0, 99.0)
RESULTS_ROOT = Path("results/e2e")
_LISTS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")


@dataclass(frozen=True)
class Workload:
    requests: list[SampleRequest]
    offsets: list[float]


def _workload(scn: Scenario) -> Workload:
    wl = scn.workload
    if not isinstance(wl, ShareGPTWorkload):
        raise UserError("workload.kind", "e2e replays ShareGPT prompts over HTTP; use a "
                        "sharegpt workload")
    if scn.is_sweep:
        raise UserError("sweep", "e2e runs one point; remove the sweep and variants sections")
    tok = load_tokenizer(scn.model, model_shape(scn.model).vocab_size)
    try:
        requests = sample_sharegpt(wl.path, wl.num_requests, tok, scn.seed,
                                   max_prompt_len=wl.max_prompt_tokens,
                                   max_output_len=wl.max_output_tokens)
    except ValueError as err:
        raise UserError("workload.path", str(err).partition(": ")[2]) from None
    offsets = arrival_offsets(len(requests), wl.request_rate, wl.burstiness, scn.seed)
    return Workload(requests, offsets)


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k not in _LISTS}


def _num_replicas(scn: Scenario) -> int:
    """Servers per arm: the cluster's replicas, when they compare like for like."""
    c = scn.cluster
    if c is None:
        return 1
    if c.prefill_replicas is not None:
        raise UserError("cluster.prefill_replicas", "e2e serves plain replicas only (no real "
                        "prefill/decode split); use cluster.replicas: N")
    if c.router != "round_robin":
        raise UserError("cluster.router", f"e2e sends requests round-robin over the servers; "
                        f"set cluster.router: round_robin (not {c.router})")
    return c.replicas or 1


def _counts(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    def delta(name: str) -> int:
        return int(after.get(name, 0.0) - before.get(name, 0.0))

    return {"requests": delta("loopserve:request_success_total"),
            "core_calls": delta("loopserve:core_calls_total"),
            "mixed_core_calls": delta("loopserve:mixed_core_calls_total")}


def _serve_arm(scn: Scenario, arm: str, scenario_file: Path, work: Workload, target: str,
               folder: Path, progress: bool) -> dict[str, Any]:
    args = ["serve", "--model", scn.model, "--scenario", str(scenario_file), "--arm", arm,
            "--port", "0", "--device", target, "--seed", str(scn.seed),
            "--served-model-name", scn.model, "--shutdown-timeout", "30"]
    n = _num_replicas(scn)
    logs = [folder / (f"server-{arm}.log" if n == 1 else f"server-{arm}-{i}.log")
            for i in range(n)]
    with ExitStack() as stack:
        servers = [stack.enter_context(ServerProcess(args, log)) for log in logs]
        if scn.runner.warmup:
            warm = [SampleRequest(r.prompt, r.prompt_len, min(4, r.output_len))
                    for r in work.requests[:2]]
            for srv in servers:
                asyncio.run(client.run(srv.url, scn.model, warm, [0.0] * len(warm),
                                       ignore_eos=True, progress=False))
        before = [srv.metrics() for srv in servers]
        outcomes, duration = asyncio.run(client.run(
            [srv.url for srv in servers], scn.model, work.requests, work.offsets,
            ignore_eos=True, progress=progress))
        after = [srv.metrics() for srv in servers]
    result = vllm_results(outcomes, duration, percentile_metrics=METRICS,
                          percentiles=PERCENTILES)
    atomic_write(folder / f"client-{arm}.json", json.dumps(result, indent=2) + "\n")
    replicas: list[dict[str, Any]] = [{**_counts(b, a), "server_exit": srv.returncode}
                for b, a, srv in zip(before, after, servers, strict=True)]
    out: dict[str, Any] = {"client": _summary(result),
                           "core_calls": sum(r["core_calls"] for r in replicas),
                           "mixed_core_calls": sum(r["mixed_core_calls"] for r in replicas),
                           "server_exit": next((r["server_exit"] for r in replicas
                                                if r["server_exit"] != 0), 0)}
    if n > 1:
        out["replicas"] = replicas
    return out


def _simulate(scn: Scenario, trace: Path, num_blocks: int, progress: bool
              ) -> dict[str, dict[str, Any]]:
    data = scn.model_dump(mode="json", exclude_none=True)
    data["workload"] = {"kind": "trace", "path": str(trace)}
    data["cache"] = {**data.get("cache", {}), "num_blocks": num_blocks}
    data["repeats"] = 1
    plan = plan_runs(validate(data).located(scn.base_dir), "sim")
    out = {}
    # the compiled simulator must not see a signal's exception; staged: no hard exit
    with interrupts.deferred(hard_exit=False):
        runs = execute(plan, progress=progress)
    for run in runs:
        outcomes = outcomes_from_records(run.records)
        end = max((o.start_s + o.latency for o in outcomes if o.success), default=0.0)
        sim = vllm_results(outcomes, end, percentile_metrics=METRICS, percentiles=PERCENTILES)
        out[run.spec.arm] = {"sim": _summary(sim),
                             "sim_core_calls": run.records.num_core_calls,
                             "sim_mixed_core_calls": run.records.num_mixed_core_calls}
        if scn.cluster is not None and (cluster := _sim_replicas(run.records)):
            out[run.spec.arm]["sim_replicas"] = cluster
    return out


def _sim_replicas(records: RunRecords) -> list[dict[str, int]]:
    """Each simulated replica's requests and core calls (empty for one replica)."""
    from sim.cluster import cluster_info

    info = cluster_info(records)
    if info is None or info.num_replicas == 1:
        return []
    rows = [{"requests": 0, "core_calls": 0, "mixed_core_calls": 0}
            for _ in range(info.num_replicas)]
    for placed in info.info.values():
        rows[placed.replica]["requests"] += 1
    steps = records.steps
    for r, calls, mixed in zip(info.step_replica, steps.core_calls, steps.mixed, strict=True):
        rows[r]["core_calls"] += calls
        rows[r]["mixed_core_calls"] += int(mixed)
    return rows


def run_e2e(scenario: str, sets: list[str], target: str, out: str | None,
            progress: bool = True) -> tuple[Path, str]:
    """Run the check; the folder written and the report's table."""
    scn = load_scenario(scenario, sets)
    work = _workload(scn)
    num_replicas = _num_replicas(scn)
    base = plan_runs(scn, "sim")  # validates every arm; the cache size the server will use
    num_blocks = base.runs[0].cfg.cache.num_blocks
    dest = run_destination(out, RESULTS_ROOT / scn.name, target)
    arms: dict[str, dict[str, Any]] = {}
    with staged_dir(dest) as tmp:
        scenario_file = tmp / "scenario.yaml"
        write_scenario(scenario_file, scn)
        trace = tmp / "requests.jsonl"
        trace.write_text("".join(json.dumps({
            "request_id": f"req-{i}", "arrival_s": t, "prompt_tokens": r.prompt_len,
            "output_tokens": r.output_len}) + "\n"
            for i, (r, t) in enumerate(zip(work.requests, work.offsets, strict=True))))
        for arm in scn.arms:
            arms[arm] = _serve_arm(scn, arm, scenario_file, work, target, tmp, progress)
        for arm, sim in _simulate(scn, trace, num_blocks, progress).items():
            arms[arm].update(sim)
        doc = {"scenario": scn.name, "model": scn.model, "target": target,
               "hardware": scn.hardware, "num_requests": len(work.requests),
               "request_rate": getattr(scn.workload, "request_rate", None), "seed": scn.seed,
               "num_replicas": num_replicas, "arms": arms}
        atomic_write(tmp / "e2e.json", json.dumps(doc, indent=2) + "\n")
        table = report_markdown(doc)
        atomic_write(tmp / "report.md", table)
    return dest, table
