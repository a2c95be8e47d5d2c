"""The wavefront arm's prompt work (A3, docs/design.md): several chunks of one prompt in
flight at once, each a (chunk, depth) item advancing one depth per step.

Under ``last_exited`` a prompt row at depth d reads only depth-d KV of earlier positions, so
chunk k may run depth d as soon as chunk k-1 has written depth d. A request's in-flight
chunks (``Request.prompt_chunks``) hold one hidden state each. A chunk's item is ready when
its depth is 0 or its own depth d-1 is done (its state exists), and the chunk before it has
written depth d; the next chunk's depth 0 is ready once the newest chunk has written depth 0.
The first chunk that reaches the last depth is finalized, and the request goes to CODA when
its whole prompt is.
"""

from __future__ import annotations

from engine.core.batch import ItemKind, ScheduledItem
from engine.core.request import PromptItem, Request
from engine.core.scheduler import Scheduler


def ready_chunks(req: Request, num_depths: int) -> list[PromptItem]:
    """The request's in-flight chunks whose next depth is ready, in chunk order."""
    chunks = req.prompt_chunks
    out: list[PromptItem] = []
    for k, p in enumerate(chunks):
        if p.depth < num_depths and (k == 0 or chunks[k - 1].depth > p.depth):
            out.append(p)
    return out


def next_chunk_start(req: Request) -> int | None:
    """Where the request's next chunk starts when its depth 0 is ready, else None."""
    chunks = req.prompt_chunks
    if chunks:
        start = chunks[-1].token_end
        ready = chunks[-1].depth > 0
    else:
        start = req.num_prefilled_tokens
        ready = True
    return start if ready and start < req.num_prompt_tokens else None


def take_chunks(s: Scheduler, budget: int) -> list[ScheduledItem]:
    """Ready prompt items in admission order, then chunk order within a request, up to
    ``budget`` rows; the first item that does not fit waits, and everything after it."""
    items: list[ScheduledItem] = []
    taken: list[Request] = []
    depths = s.num_depths
    blocked = False
    for req in s.prefill:
        num_before = len(items)
        for p in ready_chunks(req, depths):
            if p.token_count > budget:
                blocked = True
                break
            budget -= p.token_count
            items.append(_item(req, p))
        start = None if blocked else next_chunk_start(req)
        if start is not None:
            count = min(s.effective_chunk_size, req.num_prompt_tokens - start)
            if count > budget:
                blocked = True
            else:
                budget -= count
                s._grow(req, start + count)  # KV grows when a chunk's depth 0 runs
                handle = s.prompt_states.acquire(req.request_id, req.generation)
                p = PromptItem(start, count, state=handle)
                req.prompt_chunks.append(p)
                items.append(_item(req, p))
        if len(items) > num_before:
            taken.append(req)
            s.taken += [req] * (len(items) - num_before)  # one per item, for ``apply``
        if blocked:
            break
    for req in taken:
        s.prefill.remove(req)
    return items


def _item(req: Request, p: PromptItem) -> ScheduledItem:
    return ScheduledItem(
        req.request_id, req.generation, ItemKind.PROMPT, p.token_start, p.token_count,
        depth=p.depth, fused_prelude=not p.embedded,
        token_ids=() if p.embedded else tuple(req.prompt_token_ids[p.token_start:p.token_end]),
        prompt_state=p.state, prompt_item=p,
        is_last_chunk=p.token_end == req.num_prompt_tokens,
    )


def advance_chunk(s: Scheduler, req: Request, item: ScheduledItem) -> bool:
    """Apply one executed chunk item: its depth is written; finalize the leading chunks that
    ran their last depth. True when the whole prompt is done (the caller sends the request
    to CODA); otherwise the request is back in the prefill queue."""
    p = item.prompt_item
    assert p is not None
    alloc = req.kv
    assert alloc is not None
    end = item.position + item.num_tokens
    s.block_manager.mark_range(alloc, item.depth, item.position, end)
    p.depth = item.depth + 1
    p.embedded = True
    chunks = req.prompt_chunks
    while chunks and chunks[0].depth >= s.num_depths:
        done = chunks.pop(0)
        if done.state is not None:
            s.prompt_states.release(done.state)
        if req.block_hashes:
            # Every plane of [0, end) is written: its full prompt blocks can be shared.
            s.block_manager.publish(alloc.key, req.block_hashes, done.token_end)
        req.num_prefilled_tokens = req.position = done.token_end
    if req.num_prefilled_tokens >= req.num_prompt_tokens:
        if req in s.prefill:
            s.prefill.remove(req)
        return True
    if req not in s.prefill:
        s.enqueue_prefill(req)
    return False


def release_chunks(s: Scheduler, req: Request) -> None:
    """Release every in-flight chunk's hidden state (finish, abort, failure)."""
    for p in req.prompt_chunks:
        if p.state is not None:
            s.prompt_states.release(p.state)
    req.prompt_chunks.clear()
