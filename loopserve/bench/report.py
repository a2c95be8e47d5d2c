"""The printed summary of a benchmark result, laid out as vLLM prints its own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loopserve.outputs.vllm_results import percentile_word

_HEADERS = {"ttft": ("TTFT", "Time to First Token"),
            "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
            "itl": ("ITL", "Inter-token Latency"), "e2el": ("E2EL", "End-to-end Latency")}


def summary_table(result: Mapping[str, Any], metrics: Sequence[str],
                  percentiles: Sequence[float]) -> str:
    """Counts, throughputs, then mean / median / percentiles of each metric (ms)."""
    rows: list[str] = ["{:=^50}".format(" Serving Benchmark Result ")]

    def row(label: str, value: Any) -> None:
        text = f"{value:.2f}" if isinstance(value, float) else str(value)
        rows.append(f"{label:<40} {text:<10}")

    row("Successful requests:", result["completed"])
    row("Failed requests:", result["failed"])
    row("Benchmark duration (s):", float(result["duration"]))
    row("Total input tokens:", result["total_input_tokens"])
    row("Total generated tokens:", result["total_output_tokens"])
    row("Request throughput (req/s):", float(result["request_throughput"]))
    if result.get("request_goodput") is not None:
        row("Request goodput (req/s):", float(result["request_goodput"]))
    row("Output token throughput (tok/s):", float(result["output_throughput"]))
    row("Peak output token throughput (tok/s):", float(result["max_output_tokens_per_s"]))
    row("Peak concurrent requests:", float(result["max_concurrent_requests"]))
    row("Total token throughput (tok/s):", float(result["total_token_throughput"]))
    for m in metrics:
        short, header = _HEADERS[m]
        rows.append(f"{header:-^50}")
        row(f"Mean {short} (ms):", float(result[f"mean_{m}_ms"]))
        row(f"Median {short} (ms):", float(result[f"median_{m}_ms"]))
        for p in percentiles:
            word = percentile_word(p)
            row(f"P{word} {short} (ms):", float(result[f"p{word}_{m}_ms"]))
    rows.append("=" * 50)
    return "\n".join(rows)
