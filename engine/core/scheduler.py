"""Scheduler state: the stage queues and the take helpers the policies compose.

Taken requests leave their queue while their batch is in flight; ``EngineCore.apply`` puts
them back. Prompt work returns to its admission-order position, so an item that just ran a
depth never loses its place to younger prompts (RFC §2).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from engine.core.batch import ItemKind, ScheduledItem
from engine.core.block_manager import BlockManager
from engine.core.config import EngineConfig
from engine.core.request import Request


class Scheduler:
    """Queues per stage plus the selection primitives shared by all three arms."""

    def __init__(
        self,
        cfg: EngineConfig,
        block_manager: BlockManager,
        admit: Callable[[], list[Request]],
    ) -> None:
        self.cfg = cfg
        self.sched = cfg.scheduler
        self.num_depths = cfg.model.num_depths
        self.block_manager = block_manager
        self._admit = admit
        self.prefill: list[Request] = []  # admission order (admitted_seq)
        # Lists, not deques: bounded by max_num_seqs, and compiled code reaches list
        # operations directly.
        self.prelude: list[Request] = []
        self.recurrent: list[Request] = []
        self.coda: list[Request] = []
        self.prefill_batches_since_decode = 0

    # ---- queue maintenance ---------------------------------------------------------------
    def enqueue_prefill(self, req: Request) -> None:
        bisect.insort(self.prefill, req, key=lambda r: r.admitted_seq)

    def remove(self, req: Request) -> None:
        for q in (self.prelude, self.recurrent, self.coda):
            if req in q:
                q.remove(req)
        if req in self.prefill:
            self.prefill.remove(req)

    def admit(self) -> None:
        for req in self._admit():
            self.enqueue_prefill(req)

    # ---- readiness -----------------------------------------------------------------------
    def coda_ready(self) -> bool:
        if not self.coda:
            return False
        return len(self.coda) >= self.sched.min_coda_batch_size or not self.recurrent

    def decode_due(self) -> bool:
        return bool(self.recurrent) and (
            self.prefill_batches_since_decode >= self.sched.max_prefill_batches_before_decode
        )

    # ---- takes ---------------------------------------------------------------------------
    def _grow(self, req: Request, num_tokens: int) -> None:
        if self.cfg.cache.incremental_allocation and not self.block_manager.ensure_capacity(
            (req.request_id, req.generation), num_tokens
        ):
            raise RuntimeError(f"request {req.request_id}: reserved KV growth failed")

    def take_prelude(self) -> list[ScheduledItem]:
        queue = self.prelude
        decode = ItemKind.DECODE
        items = [
            ScheduledItem(req.request_id, req.generation, decode, req.position, 1, 0, 0,
                          token_ids=(req.output_token_ids[-1],))
            for req in queue
        ]
        queue.clear()
        return items

    def take_coda(self) -> list[ScheduledItem]:
        queue = self.coda
        count = min(self.sched.max_num_seqs, len(queue))
        decode = ItemKind.DECODE
        items = [
            ScheduledItem(req.request_id, req.generation, decode, req.position, 1, 0, 0,
                          params=req.params, output_index=len(req.output_token_ids))
            for req in queue[:count]
        ]
        del queue[:count]
        return items

    def take_decode(self, budget: int) -> list[ScheduledItem]:
        """Decode items from the RECURRENT queue head, up to max_num_seqs and ``budget`` rows."""
        queue = self.recurrent
        count = min(self.sched.max_num_seqs, budget, len(queue))
        items: list[ScheduledItem] = []
        incremental = self.cfg.cache.incremental_allocation
        decode = ItemKind.DECODE
        for req in queue[:count]:
            depth = req.loops_done
            if incremental and depth == 0:
                self._grow(req, req.position + 1)
            decider = req.decider
            assert decider is not None
            items.append(ScheduledItem(
                req.request_id, req.generation, decode, req.position, 1, depth, 1,
                decider.needs_signal(depth), signal_head=decider.signal_head,
            ))
        del queue[:count]
        return items

    def take_prompts(self, budget: int, *, to_last_depth: bool = False) -> list[ScheduledItem]:
        """Whole prompt items in admission order; stop at the first that does not fit."""
        items: list[ScheduledItem] = []
        taken: list[Request] = []
        for req in self.prefill:
            p = req.prompt_item
            assert p is not None
            if p.token_count > budget:
                break
            budget -= p.token_count
            if p.depth == 0:
                self._grow(req, p.token_end)
            items.append(
                ScheduledItem(
                    req.request_id, req.generation, ItemKind.PROMPT, p.token_start,
                    p.token_count, depth=p.depth,
                    num_depths=self.num_depths - p.depth if to_last_depth else 1,
                    fused_prelude=not p.embedded,
                    token_ids=() if p.embedded else
                    tuple(req.prompt_token_ids[p.token_start:p.token_end]),
                    prompt_state=p.state, prompt_item=p,
                    is_last_chunk=p.token_end == req.num_prompt_tokens,
                )
            )
            taken.append(req)
        for req in taken:
            self.prefill.remove(req)
        return items

    def take_atomic_prefill(self, budget: int) -> list[ScheduledItem]:
        """A0: chunks (clamped to the remaining budget) that run all D depths in this step."""
        items: list[ScheduledItem] = []
        taken: list[Request] = []
        for req in self.prefill:
            if budget <= 0:
                break
            start = req.num_prefilled_tokens
            count = min(self.sched.prefill_chunk_size, req.num_prompt_tokens - start, budget)
            budget -= count
            self._grow(req, start + count)
            items.append(
                ScheduledItem(
                    req.request_id, req.generation, ItemKind.PROMPT, start, count,
                    depth=0, num_depths=self.num_depths, fused_prelude=True,
                    token_ids=tuple(req.prompt_token_ids[start:start + count]),
                    is_last_chunk=start + count == req.num_prompt_tokens,
                )
            )
            taken.append(req)
        for req in taken:
            self.prefill.remove(req)
        return items
