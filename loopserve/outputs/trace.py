"""trace.json.gz: a gzip-compressed Chrome/Perfetto trace of a run's steps (open it in
ui.perfetto.dev as it is).

One process per (arm, point), one thread (track) per repeat; every step is a complete event
named by its kind with its rows per kind in ``args``. Injected requests get an extra track
per repeat with their TTFT span (arrival -> first token). Only the given points are exported
(the CLI passes the reference point), and every run (each repeat alike) keeps at most its
first ``max_steps_per_run`` steps; the cap and the runs it cut are recorded in the trace's
``otherData``. The gzip header has no name and mtime 0, so a rerun gives the same bytes.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.core.records import RequestRecord
from loopserve.stats.metrics import RunResult

_US = 1e6
_INJECTED_TID = 1000
MAX_STEPS_PER_RUN = 20_000


def select_runs(results: Sequence[RunResult], point_ids: Collection[int]) -> list[RunResult]:
    """Runs to export: every run at ``point_ids``, in execution order."""
    return [r for r in results if r.spec.point_id in point_ids]


def trace_events(
    results: Sequence[RunResult], arms: Sequence[str], point_ids: Collection[int],
    max_steps_per_run: int = MAX_STEPS_PER_RUN,
) -> list[dict[str, Any]]:
    """Trace events (microsecond timestamps) for the runs at ``point_ids``, each run's
    first ``max_steps_per_run`` steps."""
    events: list[dict[str, Any]] = []
    named: set[int] = set()
    for r in select_runs(results, point_ids):
        s = r.spec
        pid, header = _run_header(r, arms, named)
        events += header
        for st in r.records.steps[:max_steps_per_run]:
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
        events += _injected_events(r.records.requests, pid, s.repeat)
    return events


def write_trace(
    path: Path, results: Sequence[RunResult], arms: Sequence[str], point_ids: Collection[int],
    max_steps_per_run: int = MAX_STEPS_PER_RUN,
) -> None:
    """Write trace.json.gz (module docstring): the bytes ``json.dumps`` gives for
    ``trace_events``' document, with the step events formatted straight from the columns."""
    cut = [{"arm": r.spec.arm, "point_id": r.spec.point_id, "repeat": r.spec.repeat,
            "num_steps": len(r.records.steps)}
           for r in select_runs(results, point_ids) if len(r.records.steps) > max_steps_per_run]
    other = {"max_steps_per_run": max_steps_per_run, "truncated_runs": cut}
    # one run's events at a time: deflate's output does not depend on how its input is split
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                mtime=0) as gz:
        gz.write(b'{"traceEvents":[')
        for k, events in enumerate(_encoded_runs(results, arms, point_ids, max_steps_per_run)):
            gz.write(((',' if k else '') + ",".join(events)).encode())
        gz.write(('],"displayTimeUnit":"ms","otherData":' + _dumps(other) + "}\n").encode())


def _dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"))


# One step event as json.dumps writes it (keys in trace_events' order): %r of a float is its
# repr, as json's; the strings are JSON-encoded once per distinct value.
_STEP_EVENT = ('{"ph":"X","name":%s,"cat":%s,"pid":%d,"tid":%d,"ts":%r,"dur":%r,"args":{'
               '"step":%d,"core_calls":%d,"decode_rows":%d,"prompt_rows":%d,"prompt_items":%d,'
               '"fused_prelude_items":%d,"depths":%s,"mixed":%s}}')


def _encoded_runs(
    results: Sequence[RunResult], arms: Sequence[str], point_ids: Collection[int],
    max_steps_per_run: int,
) -> Iterator[list[str]]:
    """``trace_events``' events, each JSON-encoded (compact separators), a run at a time."""
    named: set[int] = set()
    for r in select_runs(results, point_ids):
        s = r.spec
        pid, header = _run_header(r, arms, named)
        out = [_dumps(e) for e in header]
        t = r.records.steps
        n = min(len(t), max_steps_per_run)
        words = [_dumps(w) for w in t.strings.values]
        start = np.frombuffer(t.start_s, dtype=np.float64)[:n]
        end = np.frombuffer(t.end_s, dtype=np.float64)[:n]
        fmt = _STEP_EVENT
        out += [fmt % (words[kind], words[stage], pid, s.repeat, ts, dur, step, calls, dec,
                       tokens, items, fused, words[depths], "true" if mixed else "false")
                for kind, stage, ts, dur, step, calls, dec, tokens, items, fused, depths, mixed
                in zip(t.kind[:n], t.stage[:n], (start * _US).tolist(),
                       ((end - start) * _US).tolist(), t.step[:n], t.core_calls[:n],
                       t.num_decode_items[:n], t.num_prompt_tokens[:n],
                       t.num_prompt_items[:n], t.num_fused_prelude_items[:n], t.depths[:n],
                       t.mixed[:n], strict=True)]
        out += [_dumps(e) for e in _injected_events(r.records.requests, pid, s.repeat)]
        yield out


def _run_header(r: RunResult, arms: Sequence[str],
                named: set[int]) -> tuple[int, list[dict[str, Any]]]:
    """A run's process id and the events that open its track: its process's name and sort
    index the first time the process appears (``named`` keeps those seen), its thread's name."""
    s = r.spec
    pid = s.point_id * len(arms) + arms.index(s.arm) + 1
    events = []
    if pid not in named:
        named.add(pid)
        events.append(_meta("process_name", pid, 0, f"{s.arm} · point {s.point_id}"))
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
    events.append(_meta("thread_name", pid, s.repeat, f"repeat {s.repeat} steps"))
    return pid, events


def _injected_events(requests: Sequence[RequestRecord], pid: int,
                     repeat: int) -> list[dict[str, Any]]:
    """A repeat's track of its injected requests' TTFT spans (those with a first token);
    none without one."""
    injected = [q for q in requests if q.injected and q.first_token_s is not None]
    if not injected:
        return []
    tid = _INJECTED_TID + repeat
    events = [_meta("thread_name", pid, tid, f"repeat {repeat} injected TTFT")]
    for q in injected:
        assert q.first_token_s is not None
        events.append({
            "ph": "X", "name": f"TTFT {q.request_id}", "cat": "ttft", "pid": pid,
            "tid": tid, "ts": q.arrival_s * _US, "dur": (q.first_token_s - q.arrival_s) * _US,
            "args": {"prompt_tokens": q.prompt_tokens, "output_tokens": q.output_tokens},
        })
    return events


def _meta(name: str, pid: int, tid: int, label: str) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": {"name": label}}
