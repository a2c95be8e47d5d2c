"""A request whose prompt ran elsewhere entering a core for decode (prefill/decode
disaggregation).

A prefill worker runs the prompt through all depths and samples the first token; its KV for
every depth plane is then sent to a decode worker. The decode side first reserves a slot
and the request's KV blocks (``reserve_prefilled``: the KV has somewhere to land), then,
when the KV has arrived, ``land_prefilled`` marks the prompt positions written on every
plane and hands the request to PRELUDE with its first token, exactly where a request that
prefilled locally stands after its first CODA step.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.core.engine_core import EngineCore
from engine.core.exits import make_decider
from engine.core.request import Request, RequestStatus, SamplingParams, Stage, frozen_ids


def can_reserve(core: EngineCore, num_prompt_tokens: int, max_tokens: int) -> bool:
    """Whether a prefilled request of this size finds a free slot and its KV blocks now."""
    if len(core.scheduler.running) >= core.cfg.scheduler.max_num_seqs:
        return False
    bm = core.block_manager
    return bm.blocks_to_admit(num_prompt_tokens + max_tokens - 1) <= bm.num_free_blocks


def reserve_prefilled(
    core: EngineCore,
    request_id: str,
    prompt_token_ids: Sequence[int],
    params: SamplingParams,
    arrival_s: float,
    now: float,
    priority: int = 0,
) -> Request | None:
    """Claim a slot and KV blocks for a request whose prompt is being transferred in; None
    (nothing changed) when either is short. The request holds them, in no queue, until
    ``land_prefilled``. Raises ValueError on a bad request, as ``add_request`` does."""
    if request_id in core.requests:
        raise ValueError(f"request_id: {request_id!r} is still active; use a new id")
    num_prompt = len(prompt_token_ids)
    if num_prompt == 0:
        raise ValueError(f"prompt: request {request_id!r} has an empty prompt")
    if not can_reserve(core, num_prompt, params.max_tokens):
        return None
    exit_cfg = params.exit or core.cfg.exit
    exit_cfg.resolved_max_loops(core.num_depths)
    req = Request(
        request_id, frozen_ids(prompt_token_ids), params, arrival_s, priority,
        generation=core._next_generation, exit=exit_cfg, arrival_seq=core._next_arrival,
    )
    bm = core.block_manager
    if not bm.can_ever_fit(req.lifetime_tokens):
        raise ValueError(
            f"request {request_id!r}: {req.lifetime_tokens} tokens need "
            f"{bm.blocks_for(req.lifetime_tokens)} KV blocks but the cache has "
            f"{bm.num_blocks}; shorten it or raise cache.num_blocks"
        )
    key = (request_id, req.generation)
    first = num_prompt + 1 if core.cfg.cache.incremental_allocation else req.lifetime_tokens
    if not bm.allocate(key, min(first, req.lifetime_tokens), req.lifetime_tokens):
        return None
    req.kv = bm.allocation(key)
    req.decider = make_decider(
        exit_cfg, core.num_depths, request_key=request_id, trace=params.exit_trace,
        seed=params.seed,
    )
    core._next_generation += 1
    core._next_arrival += 1
    sched = core.scheduler
    req.status = RequestStatus.WAITING_FOR_REMOTE_KVS  # in no queue until it lands
    req.stage = Stage.PRELUDE  # its first output token arrives with its KV
    req.admitted_seq = sched._next_admission
    req.admitted_s = now
    sched._next_admission += 1
    sched.running[request_id] = req
    core.requests[request_id] = req
    return req


def land_prefilled(core: EngineCore, request_id: str, first_token_id: int, now: float) -> None:
    """The reserved request's KV has arrived: every plane of its prompt is written and its
    first token (sampled by the prefill worker, all D depths) is delivered at ``now``."""
    req = core.requests[request_id]
    key = (request_id, req.generation)
    end = req.num_prompt_tokens
    for d in range(core.num_depths):
        core.block_manager.mark_written(key, d, 0, end)
    req.num_prefilled_tokens = end
    req.num_depths_done = core.num_depths
    req.output_token_ids.append(int(first_token_id))
    req.exit_depths.append(core.num_depths)
    req.position = end  # where the first output token runs
    req.first_token_s = now
    req.status = RequestStatus.RUNNING
    core.scheduler.requeue(req)
