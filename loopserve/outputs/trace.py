"""trace.json: a Chrome/Perfetto trace of a run's steps (open in ui.perfetto.dev).

One process per (arm, point), one thread (track) per repeat; every step is a complete event
named by its kind with its rows per kind in ``args``. Injected requests get an extra track
per repeat with their TTFT span (arrival -> first token). Only the given points are exported
(the CLI passes the reference point), and later repeats only while the total stays under
``max_steps`` steps (the first repeat of every arm always), which keeps the file small.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from loopserve.runs.loop import RunResult

_US = 1e6
_INJECTED_TID = 1000
MAX_STEPS = 200_000


def select_runs(
    results: Sequence[RunResult], point_ids: Collection[int], max_steps: int = MAX_STEPS
) -> list[RunResult]:
    """Runs to export: the first repeat at ``point_ids``, then whole repeats while the total
    stays within ``max_steps`` steps."""
    by_repeat: dict[int, list[RunResult]] = {}
    for r in results:
        if r.spec.point_id in point_ids:
            by_repeat.setdefault(r.spec.repeat, []).append(r)
    out: list[RunResult] = []
    used = 0
    for i, repeat in enumerate(sorted(by_repeat)):
        n = sum(len(r.records.steps) for r in by_repeat[repeat])
        if i > 0 and used + n > max_steps:
            break
        out += by_repeat[repeat]
        used += n
    return out


def trace_events(
    results: Sequence[RunResult], arms: Sequence[str], point_ids: Collection[int],
    max_steps: int = MAX_STEPS,
) -> list[dict[str, Any]]:
    """Trace events (microsecond timestamps) for the runs at ``point_ids``."""
    events: list[dict[str, Any]] = []
    named: set[tuple[int, int]] = set()
    for r in select_runs(results, point_ids, max_steps):
        s = r.spec
        pid = s.point_id * len(arms) + arms.index(s.arm) + 1
        if (pid, -1) not in named:
            named.add((pid, -1))
            events.append(_meta("process_name", pid, 0, f"{s.arm} · point {s.point_id}"))
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                           "args": {"sort_index": pid}})
        events.append(_meta("thread_name", pid, s.repeat, f"repeat {s.repeat} steps"))
        for st in r.records.steps:
            events.append({
                "ph": "X", "name": st.kind, "cat": st.stage, "pid": pid, "tid": s.repeat,
                "ts": st.start_s * _US, "dur": (st.end_s - st.start_s) * _US,
                "args": {
                    "step": st.step, "core_calls": st.core_calls,
                    "decode_rows": st.num_decode_items, "prompt_rows": st.num_prompt_tokens,
                    "prompt_items": st.num_prompt_items,
                    "fused_prelude_items": st.num_fused_prelude_items,
                    "depths": st.depths, "mixed": st.mixed,
                },
            })
        injected = [q for q in r.records.requests if q.injected and q.first_token_s is not None]
        if injected:
            tid = _INJECTED_TID + s.repeat
            events.append(_meta("thread_name", pid, tid, f"repeat {s.repeat} injected TTFT"))
            for q in injected:
                assert q.first_token_s is not None
                events.append({
                    "ph": "X", "name": f"TTFT {q.request_id}", "cat": "ttft", "pid": pid,
                    "tid": tid, "ts": q.arrival_s * _US,
                    "dur": (q.first_token_s - q.arrival_s) * _US,
                    "args": {"prompt_tokens": q.prompt_tokens, "output_tokens": q.output_tokens},
                })
    return events


def write_trace(
    path: Path, results: Sequence[RunResult], arms: Sequence[str], point_ids: Collection[int]
) -> None:
    doc = {"traceEvents": trace_events(results, arms, point_ids), "displayTimeUnit": "ms"}
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")


def _meta(name: str, pid: int, tid: int, label: str) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": {"name": label}}
