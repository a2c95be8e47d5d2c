"""Replay a request trace from CSV or JSONL.

Columns: ``arrival_s`` (seconds, >= 0), ``prompt_tokens`` and ``output_tokens`` (integers
>= 1), optional ``exit_depths`` (one exit depth per output token, ``"4;2;3"`` in CSV, a list
or the same string in JSONL; used by exit mode ``trace``) and optional ``request_id``
(default ``trace-<row>``). Other columns are rejected. ``.csv`` files are read as CSV with a
header row, anything else as JSON Lines. Rows are replayed in arrival order; prompt ids are
synthetic. A bad row raises ``ValueError("<file>:<line>: column <name>: <problem>")``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from engine.core.guarded_read import FileReadError, parse_json, read_text
from engine.core.records import ArrivalSpec
from loopserve.workloads.base import (
    MAX_REQUEST_TOKENS,
    StaticSource,
    StrictModel,
    prompt_ids,
    request_trace,
    sampling_params,
)

REQUIRED_COLUMNS: tuple[str, ...] = ("arrival_s", "prompt_tokens", "output_tokens")
OPTIONAL_COLUMNS: tuple[str, ...] = ("exit_depths", "request_id")


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One parsed trace row; ``line`` is its line number in the file."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    exit_depths: tuple[int, ...] | None
    line: int


class _RowError(ValueError):
    def __init__(self, column: str, problem: str) -> None:
        super().__init__(f"column {column}: {problem}")


def _as_int(column: str, value: Any, most: int | None = None) -> int:
    if isinstance(value, bool):
        raise _RowError(column, f"expected an integer >= 1, got {value!r}")
    if isinstance(value, int):
        out = value
    elif isinstance(value, str) and value.strip().lstrip("+").isdigit():
        out = int(value)
    else:
        raise _RowError(column, f"expected an integer >= 1, got {value!r}")
    if out < 1:
        raise _RowError(column, f"expected an integer >= 1, got {value!r}")
    if most is not None and out > most:
        raise _RowError(column, f"at most {most} tokens, got {out}")
    return out


def _as_time(column: str, value: Any) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        out = float(value)
    except (TypeError, ValueError):
        raise _RowError(column, f"expected seconds >= 0, got {value!r}") from None
    if not math.isfinite(out) or out < 0:
        raise _RowError(column, f"expected seconds >= 0, got {value!r}")
    return out


def _as_depths(column: str, value: Any) -> tuple[int, ...] | None:
    if value is None or value == "":
        return None
    parts = value.split(";") if isinstance(value, str) else value
    if not isinstance(parts, list | tuple):
        raise _RowError(column, f"expected depths like \"4;2;3\", got {value!r}")
    try:
        return tuple(_as_int(column, p) for p in parts)
    except _RowError:
        raise _RowError(column, f"expected depths >= 1 like \"4;2;3\", got {value!r}") from None


def _parse(fields: dict[str, Any], index: int) -> tuple[Any, ...]:
    unknown = [k for k in fields if k not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if unknown:
        raise _RowError(str(unknown[0]), "unknown column; use "
                        f"{', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)}")
    for col in REQUIRED_COLUMNS:
        if fields.get(col) in (None, ""):
            raise _RowError(col, "missing value")
    arrival = _as_time("arrival_s", fields["arrival_s"])
    prompt = _as_int("prompt_tokens", fields["prompt_tokens"], MAX_REQUEST_TOKENS)
    output = _as_int("output_tokens", fields["output_tokens"], MAX_REQUEST_TOKENS)
    depths = _as_depths("exit_depths", fields.get("exit_depths"))
    if depths is not None and len(depths) < output:
        raise _RowError("exit_depths", f"{len(depths)} depths for output_tokens {output}; "
                        "give one per output token")
    rid = fields.get("request_id")
    rid = f"trace-{index}" if rid in (None, "") else str(rid)
    return rid, arrival, prompt, output, depths


def _csv_rows(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise ValueError(f"{path}:1: column {missing[0]}: missing from the header "
                         f"(need {', '.join(REQUIRED_COLUMNS)})")
    rows = iter(reader)
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as exc:  # a NUL byte, a field past csv's size limit
            # the row that failed starts on the line after the last one read in full
            raise ValueError(f"{path}:{reader.line_num + 1}: not a CSV row ({exc})") from None
        if None in row:
            raise ValueError(f"{path}:{reader.line_num}: column {len(header) + 1}: "
                             f"more fields than the header's {len(header)}")
        yield reader.line_num, dict(row)


def _jsonl_rows(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = parse_json(line, path)
        except FileReadError as exc:
            column = f"column {exc.column}: " if exc.column is not None else ""
            raise ValueError(f"{path}:{line_no}: {column}{exc.reason}") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{path}:{line_no}: column 1: expected a JSON object per line")
        yield line_no, obj


def load_trace(path: str | Path) -> list[TraceRow]:
    """Parse and check a trace file, sorted by arrival (stable)."""
    p = Path(path)
    try:
        text = read_text(p)
    except FileReadError as exc:
        raise ValueError(f"workload.path: trace {exc}") from None
    rows_in = _csv_rows(p, text) if p.suffix.lower() == ".csv" else _jsonl_rows(p, text)
    rows: list[TraceRow] = []
    seen: dict[str, int] = {}
    for line_no, fields in rows_in:
        try:
            rid, arrival, prompt, output, depths = _parse(fields, len(rows))
        except _RowError as exc:
            raise ValueError(f"{p}:{line_no}: {exc}") from None
        if rid in seen:
            raise ValueError(f"{p}:{line_no}: column request_id: {rid!r} repeats line "
                             f"{seen[rid]}; ids must be unique")
        seen[rid] = line_no
        rows.append(TraceRow(rid, arrival, prompt, output, depths, line_no))
    if not rows:
        raise ValueError(f"workload.path: trace {p} has no requests")
    rows.sort(key=lambda r: r.arrival_s)
    return rows


class TraceWorkload(StrictModel):
    """Replays ``path`` (CSV or JSONL)."""

    kind: Literal["trace"]
    path: str = Field(min_length=1)

    def build(
        self, *, seed: int, vocab_size: int, exit_trace: Sequence[int] | None = None
    ) -> StaticSource:
        specs = [
            ArrivalSpec(
                row.request_id,
                prompt_ids(seed, i, row.prompt_tokens, vocab_size),
                sampling_params(
                    row.output_tokens,
                    request_trace(row.output_tokens, row.exit_depths, exit_trace),
                ),
                arrival_s=row.arrival_s,
            )
            for i, row in enumerate(load_trace(self.path))
        ]
        return StaticSource(specs)
