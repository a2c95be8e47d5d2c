"""The report's glossary: the terms its tables and plots use, in one or two sentences each
(vLLM's metric definitions; the looped-model terms of docs/design.md)."""

from __future__ import annotations

from loopserve.report.markup import esc

GLOSSARY: tuple[tuple[str, str], ...] = (
    ("depth, loop", "A looped model runs its shared layer stack D times per token (Ouro: D=4); "
     "each pass is one loop, and a row's depth is the loop it is at. With early exit a decode "
     "token may stop before depth D (its exit depth)."),
    ("core call", "One pass of the shared layer stack over a batch of rows, which may sit at "
     "different depths: the unit of GPU work the cost model prices."),
    ("prelude / coda", "The steps around the loops: the prelude embeds a token; the coda "
     "applies the LM head to the final hidden state and samples the next token."),
    ("token-loops", "Prompt work done: prompt tokens x D (a prompt token needs all D loops). "
     "Prompt token-loops/s is that over the run's span."),
    ("arms", "The four schedulers compared on the same workload: atomic (A0: a prompt chunk "
     "runs all D loops in one step), per_depth (A1: one loop per step, in prompt-only "
     "batches), mixed (A2: prompt rows ride in the decode core calls), wavefront (A3: as "
     "mixed, with several chunks of one prompt in flight at different depths)."),
    ("mixed calls", "Core calls that carried decode and prompt rows together (mixed and "
     "wavefront arms only)."),
    ("TTFT", "Time to first token: first token time - arrival time, per request."),
    ("ITL", "Inter-token latency: every gap between consecutive output tokens of a request, "
     "pooled over requests (vLLM's definition); its p99 is what a streaming user feels."),
    ("TPOT", "Time per output token: (finish - first token) / (output tokens - 1), per request "
     "with more than one token."),
    ("E2EL", "End-to-end latency: finish time - arrival time, per request."),
    ("output tok/s", "Output tokens / (last finish - first arrival)."),
    ("goodput", "Requests per second that met every SLO of the scenario (vLLM and "
     "DistServe's definition)."),
    ("SLO", "Service-level objective: the scenario's latency limits (slo: itl_p99_ms, "
     "ttft_p99_ms); drawn as dashed lines, met/missed in the tables."),
    ("reference point", "The sweep point whose values are the scenario's own; single-run "
     "plots, the trace and the CLI table show it."),
    ("repeat, median, spread", "Each arm runs every point several times (repeats); tables show "
     "the median over the valid repeats and, where summary.json has it, its spread."),
    ("valid", "A run that keeps the RFC §6 rules: every injected prompt found a free slot and "
     "KV blocks when it arrived, and a mixed-arm run formed at least one mixed call; invalid "
     "runs are reported and left out of medians when a valid repeat exists."),
)


def glossary_section() -> str:
    """The glossary as an HTML definition list."""
    items = "".join(f"<dt><b>{esc(term)}</b></dt><dd>{esc(text)}</dd>"
                    for term, text in GLOSSARY)
    return f"<h2>Glossary</h2><dl class='note'>{items}</dl>"
