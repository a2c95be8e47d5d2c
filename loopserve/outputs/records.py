"""steps.csv, requests.csv and tokens.csv (DESIGN.md §11): every run's records, runs in
execution order, columns fixed here. ``steps.csv`` carries the step's ``kind`` (decode |
prompt | mixed | prefill | prelude | coda) beside ``stage``, which the timeline colours by.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loopserve.outputs.files import write_csv
from loopserve.runs.loop import RunResult

RUN_KEY_COLUMNS = ("arm", "point_id", "repeat")
STEPS_COLUMNS = RUN_KEY_COLUMNS + (
    "step", "start_s", "end_s", "stage", "kind", "core_calls", "num_decode_items",
    "num_prompt_items", "num_prompt_tokens", "num_fused_prelude_items", "depths", "mixed",
)
REQUESTS_COLUMNS = RUN_KEY_COLUMNS + (
    "request_id", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s", "finish_s",
    "injected", "finish_reason",
)
TOKENS_COLUMNS = RUN_KEY_COLUMNS + (
    "request_id", "index", "time_s", "token_id", "exit_depth",
)


def write_records(folder: Path, results: Sequence[RunResult]) -> None:
    """steps.csv, requests.csv and tokens.csv, runs in execution order."""
    write_csv(folder / "steps.csv", STEPS_COLUMNS, (
        (r.spec.arm, r.spec.point_id, r.spec.repeat, s.step, s.start_s, s.end_s, s.stage,
         s.kind, s.core_calls, s.num_decode_items, s.num_prompt_items, s.num_prompt_tokens,
         s.num_fused_prelude_items, s.depths, s.mixed)
        for r in results for s in r.records.steps
    ))
    write_csv(folder / "requests.csv", REQUESTS_COLUMNS, (
        (r.spec.arm, r.spec.point_id, r.spec.repeat, q.request_id, q.arrival_s,
         q.prompt_tokens, q.output_tokens, _opt(q.first_token_s), _opt(q.finish_s),
         q.injected, _opt(q.finish_reason))
        for r in results for q in sorted(r.records.requests, key=lambda q: q.arrival_s)
    ))
    write_csv(folder / "tokens.csv", TOKENS_COLUMNS, (
        (r.spec.arm, r.spec.point_id, r.spec.repeat, t.request_id, t.index, t.time_s,
         t.token_id, t.exit_depth)
        for r in results for t in r.records.tokens
    ))


def _opt(value: Any) -> Any:
    return "" if value is None else value
