"""The record tables of a run folder (docs/design.md): ``steps``, ``requests``,
``itl_quantiles`` and, when asked for, ``tokens``, as Parquet (zstd, the default) or CSV
(``outputs.format``), runs in execution order, columns fixed here.

``steps`` carries the step's ``kind`` (decode | prompt | mixed | prefill | prelude | coda)
beside ``stage``, which the timeline colours by. ``tokens`` (one row per output token) is
written when the scenario sets ``outputs.tokens: true`` and always on a real target, where
the token ids are data; a simulated run's token ids are draws of the simulator. Without it
the ITL distribution stays in ``itl_quantiles``: per arm and point, the ITL (ms) at fixed
quantiles of every gap pooled over repeats (numpy's linear interpolation, as summary.json),
with the number of gaps.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from loopserve.outputs.tables import Codes, Columns, Schema, write_table
from loopserve.stats.metrics import RunResult, inter_token_latencies
from sim.cluster import cluster_info

if TYPE_CHECKING:
    from sim.cluster.records import ClusterInfo

RUN_KEY_SCHEMA: Schema = (("arm", "text"), ("point_id", "int"), ("repeat", "int"))
STEPS_SCHEMA: Schema = RUN_KEY_SCHEMA + (
    ("step", "counter"), ("start_s", "float"), ("end_s", "float"), ("stage", "text"),
    ("kind", "text"), ("core_calls", "int"), ("num_decode_items", "int"),
    ("num_prompt_items", "int"), ("num_prompt_tokens", "int"),
    ("num_fused_prelude_items", "int"), ("depths", "text"), ("mixed", "bool"),
    ("num_readbacks", "int"), ("max_prompt_items_per_request", "int"),
)
REQUESTS_SCHEMA: Schema = RUN_KEY_SCHEMA + (
    ("request_id", "text"), ("arrival_s", "float"), ("prompt_tokens", "int"),
    ("output_tokens", "int"), ("first_token_s", "float"), ("finish_s", "float"),
    ("injected", "bool"), ("finish_reason", "text"),
)
TOKENS_SCHEMA: Schema = RUN_KEY_SCHEMA + (
    ("request_id", "text"), ("index", "int"), ("time_s", "float"), ("token_id", "int"),
    ("exit_depth", "int"),
)
# a cluster run's requests gain the replica that decoded them; disaggregated, also where the
# prompt ran and its KV transfer (seconds holding a link, bytes)
CLUSTER_REQUESTS_SCHEMA: Schema = (("replica", "int"),)
PD_REQUESTS_SCHEMA: Schema = (("prefill_replica", "int"), ("kv_transfer_s", "float"),
                              ("kv_bytes", "int"))
ITL_SCHEMA: Schema = (("arm", "text"), ("point_id", "int"), ("quantile", "float"),
                      ("itl_ms", "float"), ("num_gaps", "int"))
RUN_KEY_COLUMNS = tuple(c for c, _ in RUN_KEY_SCHEMA)
TOKENS_COLUMNS = tuple(c for c, _ in TOKENS_SCHEMA)
ITL_COLUMNS = tuple(c for c, _ in ITL_SCHEMA)
# 0, 0.5%, ..., 99%, then the tail at 1 - 10^-x for x = 2.05 .. 5 (p99.999), then the max
ITL_QUANTILES = tuple(np.unique(np.concatenate([
    np.arange(199) / 200, 1 - 10 ** -np.arange(2.0, 5.0001, 0.05), [1.0]])).tolist())


def write_records(folder: Path, results: Sequence[RunResult], fmt: str = "parquet",
                  tokens: bool = True) -> list[Path]:
    """Write the tables (module docstring) in ``fmt``; returns the files written. A cluster
    run's steps gain ``replica``, its requests ``CLUSTER_REQUESTS_SCHEMA`` (and
    ``PD_REQUESTS_SCHEMA`` when disaggregated)."""
    infos = [cluster_info(r.records) for r in results]
    steps_schema, requests_schema = STEPS_SCHEMA, REQUESTS_SCHEMA
    if any(infos):
        steps_schema += (("replica", "int"),)
        requests_schema += CLUSTER_REQUESTS_SCHEMA
        if any(i is not None and i.disaggregated for i in infos):
            requests_schema += PD_REQUESTS_SCHEMA
    written = [
        write_table(folder, "steps", fmt, steps_schema,
                    [_steps(r, i) for r, i in zip(results, infos, strict=True)]),
        write_table(folder, "requests", fmt, requests_schema,
                    [_requests(r, i) for r, i in zip(results, infos, strict=True)]),
        write_table(folder, "itl_quantiles", fmt, ITL_SCHEMA, itl_quantile_parts(results)),
    ]
    if tokens:
        written.append(write_table(folder, "tokens", fmt, TOKENS_SCHEMA,
                                   [_tokens(r) for r in results]))
    return written


def _keys(r: RunResult, n: int) -> dict[str, np.ndarray | Codes]:
    s = r.spec
    return {"arm": Codes.constant(s.arm, n), "point_id": np.full(n, s.point_id, np.int64),
            "repeat": np.full(n, s.repeat, np.int64)}


def _ints(values: object) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _view(column: array[Any]) -> np.ndarray:
    """A record column as numpy without a copy (its own width: int8 .. int64, float64)."""
    dtype = np.dtype(column.typecode)
    return np.frombuffer(column, dtype=dtype) if len(column) else np.empty(0, dtype)


def _steps(r: RunResult, info: ClusterInfo | None = None) -> Columns:
    t = r.records.steps
    words = list(t.strings.values)
    cols: dict[str, np.ndarray | Codes] = _keys(r, len(t))
    cols.update({
        "step": _view(t.step), "start_s": _view(t.start_s), "end_s": _view(t.end_s),
        "stage": Codes(_view(t.stage), words), "kind": Codes(_view(t.kind), words),
        "core_calls": _view(t.core_calls), "num_decode_items": _view(t.num_decode_items),
        "num_prompt_items": _view(t.num_prompt_items),
        "num_prompt_tokens": _view(t.num_prompt_tokens),
        "num_fused_prelude_items": _view(t.num_fused_prelude_items),
        # PRELUDE and CODA steps have no depths: an empty field, missing when read back
        "depths": Codes(_view(t.depths), [w or None for w in words]),
        "mixed": _view(t.mixed).astype(bool), "num_readbacks": _view(t.num_readbacks),
        "max_prompt_items_per_request": _view(t.max_prompt_items_per_request),
        "replica": np.zeros(len(t), np.int64) if info is None else _view(info.step_replica),
    })
    return cols


def _requests(r: RunResult, info: ClusterInfo | None = None) -> Columns:
    reqs = sorted(r.records.requests, key=lambda q: q.arrival_s)
    reasons: list[str | None] = sorted({q.finish_reason or "" for q in reqs})
    code = {v: i for i, v in enumerate(reasons)}
    cols: dict[str, np.ndarray | Codes] = _keys(r, len(reqs))
    cols.update({
        "request_id": Codes(np.arange(len(reqs), dtype=np.int32), [q.request_id for q in reqs]),
        "arrival_s": np.array([q.arrival_s for q in reqs], dtype=np.float64),
        "prompt_tokens": _ints([q.prompt_tokens for q in reqs]),
        "output_tokens": _ints([q.output_tokens for q in reqs]),
        "first_token_s": _opt_floats([q.first_token_s for q in reqs]),
        "finish_s": _opt_floats([q.finish_s for q in reqs]),
        "injected": np.array([q.injected for q in reqs], dtype=bool),
        "finish_reason": Codes(_ints([code[q.finish_reason or ""] for q in reqs]),
                               [v or None for v in reasons]),
    })
    where = [None if info is None else info.info[q.request_id] for q in reqs]
    cols.update({
        "replica": _ints([0 if w is None else w.replica for w in where]),
        "prefill_replica": _ints([-1 if w is None else w.prefill_replica for w in where]),
        "kv_transfer_s": np.array([np.nan if w is None else w.kv_transfer_s for w in where],
                                  dtype=np.float64),
        "kv_bytes": _ints([0 if w is None else w.kv_bytes for w in where]),
    })
    return cols


def _opt_floats(values: list[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _tokens(r: RunResult) -> Columns:
    t = r.records.tokens
    cols: dict[str, np.ndarray | Codes] = _keys(r, len(t))
    cols.update({
        "request_id": Codes(_view(t.request), list(t.request_ids.values)),
        "index": _view(t.index), "time_s": _view(t.time_s),
        "token_id": _view(t.token_id), "exit_depth": _view(t.exit_depth),
    })
    return cols


def itl_quantile_parts(results: Sequence[RunResult]) -> list[Columns]:
    """``itl_quantiles``' rows: per (arm, point) in execution order, the pooled gaps'
    quantiles (none for a pair without gaps)."""
    pooled: dict[tuple[str, int], list[np.ndarray]] = {}
    for r in results:
        pooled.setdefault((r.spec.arm, r.spec.point_id), []).append(
            r.itl_s if r.itl_s is not None else inter_token_latencies(r.records))
    q = np.array(ITL_QUANTILES)
    parts: list[Columns] = []
    for (arm, point_id), gaps in pooled.items():
        ms = np.concatenate(gaps) * 1e3
        if not ms.size:
            continue
        parts.append({"arm": Codes.constant(arm, q.size),
                      "point_id": np.full(q.size, point_id, np.int64), "quantile": q,
                      "itl_ms": np.quantile(ms, q), "num_gaps": np.full(q.size, ms.size)})
    return parts
