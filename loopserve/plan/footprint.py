"""Will the runs fit in memory? An estimate checked before any work.

Three things grow with a scenario's sizes: the synthetic prompt ids of one run's source, the
KV cache (the core's block bookkeeping; on a real target also the KV tensors, the prompt
and decode state buffers, the weights and the largest step's activations and attention
scratch) of the largest arm, and the records of every run
(kept in memory until the run folder is written). Each is estimated from the scenario alone
(no source built, nothing allocated) and compared with the memory available now: the
host's ``MemAvailable`` (``/proc/meminfo``, else ``os.sysconf``), capped by
``LOOPSERVE_MEMORY_LIMIT`` (bytes) when set, and the GPU's free memory on cuda. Past it, a
``UserError`` names the field that sets the size and the fix. The per-item byte counts are
measured on CPython 3.11 (tracemalloc over the interference sweep) with headroom.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from engine.core.config import EngineConfig, ModelShape
from loopserve.errors import UserError
from loopserve.plan.sweep import SweepPoint
from loopserve.schema.scenario import Scenario
from loopserve.workloads import (
    GammaWorkload,
    InterferenceWorkload,
    LengthSpec,
    LognormalLength,
    PoissonWorkload,
    ShareGPTWorkload,
    TraceWorkload,
    UniformLength,
    length_max,
    load_sharegpt,
    load_trace,
)

PROMPT_ID_BYTES = 16  # one synthetic prompt id: a tuple slot (int objects are shared per id)
BLOCK_BOOKKEEPING_BYTES = 64  # one KV block in the core: free deque + tables (40 B measured)
TOKEN_RECORD_BYTES = 32  # one output token in TokenTable's columns (21 B a row + growth)
STEP_RECORD_BYTES = 64  # one step in StepTable's columns (59 B a row)
REQUEST_RECORD_BYTES = 1024  # one RequestRecord and its arrival spec
RUN_BYTES = 256 << 10  # what any run keeps besides (under 0.2 MiB measured)
# Steps are counted as one per 4 output tokens: fewer than a loaded run has (one per token
# and decoder), more than the lightest (one per token); tests/loopserve/test_footprint.py holds the
# whole estimate between what three such workloads hold and 4x that.
DECODE_ROWS_PER_STEP = 4
WRITE_FACTOR = 1.5  # writing builds the record tables beside the records
# Device bytes the allocator holds beyond the tensors (rounding, fragmentation: glibc on the
# CPU, the caching allocator on CUDA).
ALLOCATOR_SLACK = 1.05
LIMIT_ENV = "LOOPSERVE_MEMORY_LIMIT"


@dataclass(frozen=True)
class WorkloadSize:
    """Upper bounds of one run's requests and tokens, and the field that sets them."""

    num_requests: int
    prompt_tokens: int
    output_tokens: int
    field: str


def workload_size(scn: Scenario) -> WorkloadSize:
    """The sizes of ``scn``'s workload from its spec (a trace file's rows are read)."""
    w = scn.workload
    if isinstance(w, InterferenceWorkload):
        pop = w.decode_population
        return WorkloadSize(pop + len(w.inject),
                            pop * w.decode_prompt_tokens + sum(i.prompt_tokens for i in w.inject),
                            pop * w.decode_output_tokens + sum(i.output_tokens for i in w.inject),
                            "workload.decode_population")
    if isinstance(w, PoissonWorkload | GammaWorkload):
        n = w.num_requests
        return WorkloadSize(n, _total(n, w.prompt_tokens), _total(n, w.output_tokens),
                            "workload.num_requests")
    if isinstance(w, ShareGPTWorkload):
        n = w.num_requests
        try:
            pairs = load_sharegpt(w.path)
        except ValueError as err:
            raise UserError.from_value_error(err, "workload.path") from None
        prompt = sum(min(p, w.max_prompt_tokens) for p, _ in pairs) / len(pairs)
        output = sum(min(o, w.max_output_tokens) for _, o in pairs) / len(pairs)
        return WorkloadSize(n, math.ceil(n * prompt), math.ceil(n * output),
                            "workload.num_requests")
    assert isinstance(w, TraceWorkload)
    try:
        rows = load_trace(w.path)
    except ValueError as err:
        raise UserError.from_value_error(err, "workload.path") from None
    return WorkloadSize(len(rows), sum(r.prompt_tokens for r in rows),
                        sum(r.output_tokens for r in rows), "workload.path")


def _total(n: int, spec: LengthSpec) -> int:
    """About the sum of ``n`` draws of ``spec``: its mean (clipped to its range) times n."""
    if isinstance(spec, LognormalLength):
        mean = min(spec.max, max(spec.min, spec.median * math.exp(spec.sigma ** 2 / 2)))
        return math.ceil(n * mean)
    if isinstance(spec, UniformLength):
        return math.ceil(n * (spec.low + spec.high) / 2)
    return n * length_max(spec)


def available_bytes() -> int:
    """Host memory available now, capped by ``LOOPSERVE_MEMORY_LIMIT`` when set."""
    avail = _meminfo_available()
    limit = os.environ.get(LIMIT_ENV)
    if limit:
        try:
            avail = min(avail, int(limit))
        except ValueError:
            raise UserError(LIMIT_ENV, f"{limit!r} is not a number of bytes") from None
    return avail


def _meminfo_available() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def gib(n: float) -> str:
    """Bytes as a short human size."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n / 1024:.1f} KiB"


def check_sources(scn: Scenario, points: Iterable[SweepPoint],
                  shape: ModelShape) -> dict[int, WorkloadSize]:
    """Each point's workload size; UserError when one run's prompt ids, or the records of
    one run, of its repeats or of all runs cannot fit (checked before any source is built)."""
    avail = available_bytes()
    sizes: dict[int, WorkloadSize] = {}
    total, num_runs = 0, 0
    for p in points:
        size = sizes[p.point_id] = workload_size(p.scenario)
        where = f" (point {p.point_id})" if scn.is_sweep else ""
        need = size.prompt_tokens * PROMPT_ID_BYTES
        if need > avail:
            raise UserError(size.field, f"the prompts of one run hold about {size.prompt_tokens}"
                            f" tokens, ~{gib(need)} of prompt ids{where}, {gib(avail)} "
                            "available; use fewer or shorter prompts")
        per_run = records_bytes(size, _smallest_budget(p.scenario), shape.num_depths)
        if per_run > avail:
            raise UserError(size.field, f"one run's records ({size.num_requests} requests, "
                            f"{size.output_tokens} output tokens) need ~{gib(per_run)}{where}, "
                            f"{gib(avail)} available; use fewer requests or output tokens")
        runs = scn.repeats * len(scn.arms)
        if per_run * runs > avail:
            raise UserError("repeats", f"{scn.repeats} repeats x {len(scn.arms)} arms of "
                            f"~{gib(per_run)} of records each need ~{gib(per_run * runs)}"
                            f"{where}, {gib(avail)} available; lower repeats")
        total, num_runs = total + per_run * runs, num_runs + runs
    if total > avail:
        raise UserError("sweep", f"the records of all {num_runs} runs need ~{gib(total)}, "
                        f"{gib(avail)} available; run fewer points per command")
    return sizes


def _smallest_budget(scn: Scenario) -> int:
    budgets = [scn.scheduler.max_num_batched_tokens]
    budgets += [o.max_num_batched_tokens for o in scn.arm_overrides.values()
                if o.max_num_batched_tokens]
    return max(1, min(budgets))


def device_bytes(cfg: EngineConfig, dtype_bytes: int, max_context: int | None = None,
                 attention: str = "triton") -> int:
    """What a real runner of ``cfg`` holds on its device at its peak: KV tensors, state
    buffers, weights, and the largest step's transient memory (``step_bytes``) for contexts
    up to ``max_context`` positions (None: a whole depth plane of the cache)."""
    m, c, s = cfg.model, cfg.cache, cfg.scheduler
    kv = 2 * m.num_layers * c.num_blocks * c.block_size * m.num_kv_heads * m.head_dim
    # prompt state per in-flight chunk (EngineConfig.max_prompt_states), one decode row each
    states = (cfg.max_prompt_states * s.effective_chunk_size + s.max_num_seqs) * m.hidden_size
    attn = m.hidden_size * (2 * m.num_heads + 2 * m.num_kv_heads) * m.head_dim
    weights = 2 * m.vocab_size * m.hidden_size + m.num_layers * (
        attn + 3 * m.hidden_size * m.intermediate_size)
    if max_context is None:
        max_context = c.num_blocks * c.block_size // c.num_planes(m.num_depths)
    total = (kv + states + weights) * dtype_bytes + step_bytes(cfg, dtype_bytes, max_context,
                                                               attention)
    return math.ceil(total * ALLOCATOR_SLACK)


def step_bytes(cfg: EngineConfig, dtype_bytes: int, max_context: int, attention: str) -> int:
    """The largest step's transient memory: one layer's activations over a full budget of
    rows (no autograd, so layers do not accumulate), plus the larger of the attention
    scratch and a CODA step's fp32 logits. The ``torch`` reference backend attends in fp32
    over gathered K/V repeated to every head, with the score matrix materialised: for the
    decode rows (max_num_seqs x ``max_context``) or one prompt chunk (chunk x
    ``max_context``), whichever is larger; the Triton kernel keeps its tiles on chip, so
    only its fp32 output counts."""
    m, s = cfg.model, cfg.scheduler
    rows = s.max_num_batched_tokens
    qkv = (m.num_heads + 2 * m.num_kv_heads) * m.head_dim
    # residual, norm, rotary copies of q/k, attention out, o_proj out; gate, up, act, product
    per_row = 6 * m.hidden_size + 2 * qkv + m.num_heads * m.head_dim + 4 * m.intermediate_size
    activations = rows * per_row * dtype_bytes
    heads_kv = (m.num_heads + m.num_kv_heads) * m.head_dim  # gathered + repeated, per position
    out_fp32 = rows * m.num_heads * m.head_dim * 4
    if attention == "torch":
        decode = s.max_num_seqs * max_context * (2 * heads_kv + 2 * m.num_heads)
        chunk = s.effective_chunk_size
        prompt = max_context * 2 * heads_kv + chunk * max_context * (m.num_heads + 1)
        scratch = out_fp32 + 4 * max(decode, prompt)
    else:
        scratch = out_fp32
    logits = s.max_num_seqs * m.vocab_size * 4 * 2  # logits and the sampler's probabilities
    return max(activations + scratch, logits)


def records_bytes(size: WorkloadSize, budget: int, num_depths: int) -> int:
    """One run's records: tokens, steps (a decode step per ``DECODE_ROWS_PER_STEP`` output
    tokens, plus the prompt tokens of every depth in steps of ``budget`` tokens, plus a last
    chunk per request and depth) and requests, with the copies writing makes."""
    steps = math.ceil(size.output_tokens / DECODE_ROWS_PER_STEP
                      + (size.prompt_tokens / budget + size.num_requests) * num_depths)
    one = (size.output_tokens * TOKEN_RECORD_BYTES + steps * STEP_RECORD_BYTES
           + size.num_requests * REQUEST_RECORD_BYTES)
    return RUN_BYTES + math.ceil(one * WRITE_FACTOR)


def check_plan(scn: Scenario, configs: Mapping[tuple[int, str], EngineConfig], *,
               target: str, dtype_bytes: int, device_free: int | None,
               lifetimes: Mapping[int, int] | None = None) -> None:
    """UserError when an arm's KV cache (the core's bookkeeping; on a real target its
    tensors, state buffers, weights and largest step too, for requests of up to
    ``lifetimes[point_id]`` positions) cannot fit in host or GPU memory."""
    avail = available_bytes()
    backend = scn.runner.attention_backend
    attention = ("torch" if target == "cpu" else "triton") if backend == "auto" else backend
    for (point_id, arm), cfg in configs.items():
        context = (lifetimes or {}).get(point_id)
        kv_dev = device_bytes(cfg, dtype_bytes, context, attention) if target != "sim" else 0
        host = cfg.cache.num_blocks * BLOCK_BOOKKEEPING_BYTES + (kv_dev if target == "cpu" else 0)
        where = f"arm {arm}" + (f", point {point_id}" if scn.is_sweep else "")
        if host > avail:
            _kv_error(scn, cfg, host, avail, "host", where)
        if target == "cuda" and device_free is not None and kv_dev > device_free:
            _kv_error(scn, cfg, kv_dev, device_free, "GPU", where)


def _kv_error(scn: Scenario, cfg: EngineConfig, need: int, avail: int, where_mem: str,
              where: str) -> None:
    blocks = cfg.cache.num_blocks
    if scn.cache.num_blocks is not None:
        raise UserError("cache.num_blocks", f"{blocks} blocks of {cfg.cache.block_size} tokens "
                        f"need ~{gib(need)} of {where_mem} memory ({where}), {gib(avail)} "
                        "available; lower cache.num_blocks or cache.block_size")
    raise UserError("cache.num_blocks", f"sized automatically to {blocks} blocks (max_num_seqs "
                    f"{cfg.scheduler.max_num_seqs} x the longest request), ~{gib(need)} of "
                    f"{where_mem} memory ({where}), {gib(avail)} available; set "
                    "cache.num_blocks, lower scheduler.max_num_seqs or shorten the longest "
                    "request")
