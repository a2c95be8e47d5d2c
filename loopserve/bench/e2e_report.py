"""The e2e report: one table, every arm's client-side metrics above its simulation's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

COLUMNS = (("TTFT p50", "median_ttft_ms"), ("TTFT p99", "p99_ttft_ms"),
           ("TPOT p50", "median_tpot_ms"), ("TPOT p99", "p99_tpot_ms"),
           ("ITL p50", "median_itl_ms"), ("ITL p99", "p99_itl_ms"),
           ("out tok/s", "output_throughput"))


def _row(arm: str, world: str, r: Mapping[str, Any], mixed: int, calls: int) -> str:
    cells = [f"{float(r[key]):.2f}" for _, key in COLUMNS]
    return f"| {arm} | {world} | " + " | ".join(cells) + \
        f" | {r['failed']} | {mixed} | {calls} |"


def report_markdown(doc: Mapping[str, Any]) -> str:
    """Markdown: a heading naming the run, the table, how to read it."""
    head = ["| arm | world | " + " | ".join(c for c, _ in COLUMNS)
            + " | failed | mixed calls | core calls |",
            "|---|---|" + "---:|" * (len(COLUMNS) + 3)]
    rows = []
    for arm, a in doc["arms"].items():
        rows.append(_row(arm, "client", a["client"], a["mixed_core_calls"], a["core_calls"]))
        if "sim" in a:
            rows.append(_row(arm, "sim", a["sim"], a["sim_mixed_core_calls"],
                             a["sim_core_calls"]))
    shares = [f"{arm}: client {[r['requests'] for r in a['replicas']]}, sim "
              f"{[r['requests'] for r in a.get('sim_replicas', [])]}"
              for arm, a in doc["arms"].items() if "replicas" in a]
    exits = {arm: a.get("server_exit") for arm, a in doc["arms"].items()}
    bad = {arm: rc for arm, rc in exits.items() if rc != 0}
    return "\n".join([
        f"# e2e {doc['scenario']}: {doc['model']} on {doc['target']}, {doc['num_requests']} "
        f"ShareGPT requests at {doc['request_rate']} req/s (seed {doc['seed']})"
        + (f", {n} replicas round-robin" if (n := doc.get("num_replicas", 1)) > 1 else ""),
        "",
        *head, *rows,
        "",
        "Times in ms. client: `bench serve` over HTTP (`/v1/completions`, stream=true) to "
        "`loopserve serve`, timed on the client as `vllm bench serve` does; mixed and core "
        "calls from the server's `/metrics` over the replay. sim: the same requests and "
        f"arrival times in the simulator ({doc['hardware']} cost model), timed from each "
        "request's arrival. Equal arrivals do not give equal overlap: read mixed calls "
        "beside the latencies.",
        *(["", "Requests per replica (client: each server's `/metrics`; sim: the simulated "
            "round-robin router): " + "; ".join(shares) + "."] if shares else []),
        "" if not bad else f"\nServer exit status other than 0: {bad}",
    ]) + "\n"
