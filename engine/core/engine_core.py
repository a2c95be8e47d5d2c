"""EngineCore: the pure scheduling core both executors drive (docs/design.md).

    batch  = core.schedule(now)
    result = executor.execute(batch)
    events = core.apply(batch, result, now_after)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from engine.core.batch import (
    Batch,
    FinalizeOp,
    Housekeeping,
    ItemKind,
    PendingHousekeeping,
    ScheduledItem,
)
from engine.core.block_manager import BlockManager
from engine.core.config import EngineConfig
from engine.core.errors import StaleResultError
from engine.core.exits import make_decider, validate_trace
from engine.core.policies import make_policy
from engine.core.prompt_state import PromptStateHandles
from engine.core.request import (
    Request,
    RequestStatus,
    SamplingParams,
    Stage,
    TokenLogprobs,
    frozen_ids,
)
from engine.core.results import CodaResult, RecurrentResult, StepResult, TokenEvent, result_matches
from engine.core.scheduler import Scheduler


class EngineCore:
    """Owns requests, queues, KV bookkeeping and prompt-state handles; never reads a clock."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.num_depths = cfg.model.num_depths
        self.block_manager = BlockManager(cfg.cache, self.num_depths)
        self.prompt_states = PromptStateHandles(cfg.max_prompt_states)
        self.scheduler = Scheduler(
            cfg, self.block_manager, self.prompt_states, make_policy(cfg.scheduler.arm)
        )
        self.requests: dict[str, Request] = {}  # every unfinished request, waiting or running
        self._finished: list[Request] = []
        self.pending = PendingHousekeeping(self.prompt_states)
        self._next_generation = 0
        self._next_arrival = 0
        self._next_step = 0
        self._now = 0.0
        # The latest scheduled batch until it is applied or failed: ``apply`` then reads its
        # items' requests from ``scheduler.taken`` instead of looking each one up by id.
        self._scheduled: Batch | None = None
        # The wavefront arm's chunk hooks, loaded only by its runs (once: an import in a
        # compiled function runs on every call).
        self._advance_chunk: Callable[[Scheduler, Request, ScheduledItem], bool] | None = None
        self._release_chunks: Callable[[Scheduler, Request], None] | None = None
        if cfg.scheduler.arm == "wavefront":
            from engine.core.wavefront import advance_chunk, release_chunks

            self._advance_chunk = advance_chunk
            self._release_chunks = release_chunks

    # ---- requests ------------------------------------------------------------------------
    def add_request(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        params: SamplingParams,
        arrival_s: float,
        priority: int = 0,
        prefix_group: str | None = None,
    ) -> Request:
        """Queue a request. Raises ValueError on a bad request (nothing is queued).
        ``prefix_group`` names the requests sharing one prompt's prefill (the ``n`` samples
        of one prompt): without prefix caching they still share its full prompt blocks,
        with each other only."""
        if request_id in self.requests:
            raise ValueError(f"request_id: {request_id!r} is still active; use a new id")
        if len(prompt_token_ids) == 0:
            raise ValueError(f"prompt: request {request_id!r} has an empty prompt")
        exit_cfg = params.exit or self.cfg.exit
        exit_cfg.resolved_max_loops(self.num_depths)
        trace = params.exit_trace
        if exit_cfg.mode == "trace":
            if trace is None:
                raise ValueError(f"exit_trace: request {request_id!r} uses trace mode without one")
            validate_trace(trace, exit_cfg, self.num_depths, params.max_tokens, request_id)
        req = Request(
            request_id, frozen_ids(prompt_token_ids), params, arrival_s, priority,
            generation=self._next_generation, exit=exit_cfg, arrival_seq=self._next_arrival,
        )
        if not self.block_manager.can_ever_fit(req.lifetime_tokens):
            raise ValueError(
                f"request {request_id!r}: {req.lifetime_tokens} tokens need "
                f"{self.block_manager.blocks_for(req.lifetime_tokens)} KV blocks but the cache has "
                f"{self.block_manager.num_blocks}; shorten it or raise cache.num_blocks"
            )
        req.block_hashes = self.block_manager.block_hashes(req.prompt_token_ids, prefix_group)
        req.decider = make_decider(
            exit_cfg, self.num_depths, request_key=request_id, trace=trace, seed=params.seed
        )
        self._next_generation += 1
        self._next_arrival += 1
        self.requests[request_id] = req
        self.scheduler.add(req)
        return req

    def abort(self, request_id: str, reason: str = "abort") -> bool:
        """Finish a request with ``reason`` (``stop`` when a front end found a stop string in
        its text) and release everything it holds; False when it is not active."""
        req = self.requests.get(request_id)
        if req is None:
            return False
        self._finish(req, reason)
        return True

    def has_work(self) -> bool:
        return bool(self.requests)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    def has_finished(self) -> bool:
        """Whether a request finished since the last ``pop_finished``."""
        return bool(self._finished)

    def pop_finished(self) -> list[Request]:
        """Requests finished since the last call (any reason), in finish order."""
        out, self._finished = self._finished, []
        return out

    # ---- the step ------------------------------------------------------------------------
    def schedule(self, now: float) -> Batch | None:
        """Pick the next batch, or None when nothing can run now."""
        self._now = now
        self._scheduled = None
        sel = self.scheduler.schedule(now)
        if sel is None:
            return None
        items = tuple(sel[1])
        assert len(self.scheduler.taken) == len(items)
        batch = Batch(self._next_step, sel[0], items, self.pending.take())
        self._next_step += 1
        self._scheduled = batch
        return batch

    def take_housekeeping(self) -> Housekeeping:
        """Finalize copies and releases pending since the last batch (drivers call this at
        drain so the runner frees everything)."""
        return self.pending.take()

    def apply(self, batch: Batch, result: StepResult, now: float) -> list[TokenEvent]:
        """Apply an executed batch's result; items of aborted or reused ids are ignored."""
        if not result_matches(batch, result):
            raise StaleResultError(
                f"result for step {result.step} ({type(result).__name__}) does not fit "
                f"batch {batch.step} ({batch.stage.value}, {len(batch.items)} items)"
            )
        self._now = now
        stage = batch.stage
        reqs = self._requests_of(batch)
        if stage is Stage.RECURRENT:
            assert isinstance(result, RecurrentResult)
            self._apply_recurrent(batch, reqs, result.decode_signals)
            return []
        events: list[TokenEvent] = []
        items = batch.items
        for i, req in enumerate(reqs):
            if req is None or req.status is RequestStatus.FINISHED:
                continue  # aborted, failed or reused id: a late result never touches it
            item = items[i]
            if stage is Stage.PRELUDE:
                self._apply_prelude(req)
            elif stage is Stage.CODA:
                assert isinstance(result, CodaResult)
                lp = None if result.logprobs is None else result.logprobs[i]
                events.append(self._apply_coda(req, result.token_ids[i], now, lp))
            else:
                self._apply_prompt(req, item)
        return events

    def _requests_of(self, batch: Batch) -> list[Request | None]:
        """Each item's request as scheduled, or None where its id no longer names it; the
        caller skips finished ones too. A finished request never runs again, so the latest
        batch's own requests (``scheduler.taken``) stand in for the lookup by id
        (``_lookup_requests``), which any other batch gets."""
        if batch is self._scheduled:
            self._scheduled = None
            return cast(list[Request | None], self.scheduler.taken)  # read, never written
        return self._lookup_requests(batch)

    def _lookup_requests(self, batch: Batch) -> list[Request | None]:
        out: list[Request | None] = []
        for item in batch.items:
            req = self.requests.get(item.request_id)
            out.append(req if req is not None and req.generation == item.generation else None)
        return out

    def _apply_recurrent(
        self, batch: Batch, reqs: list[Request | None], signals: tuple[float, ...] | None,
    ) -> None:
        decode_index = 0
        finished = RequestStatus.FINISHED
        items = batch.items
        for i, req in enumerate(reqs):
            item = items[i]
            stale = req is None or req.status is finished
            if item.kind is ItemKind.PROMPT:
                if not stale:
                    assert req is not None
                    self._apply_prompt(req, item)
                continue
            signal = None if signals is None else signals[decode_index]
            decode_index += 1
            if stale:
                continue
            assert req is not None
            if signal is None and item.needs_signal:
                raise StaleResultError(f"step {batch.step}: request {req.request_id} needs a "
                                       "gate signal but the result carries none")
            self._apply_decode(req, item, signal)

    def fail(self, batch: Batch, error: str = "error") -> list[str]:
        """The batch-failure path: its requests finish with reason ``error`` and release all;
        its housekeeping goes out again with the next batch (contracts.md: idempotent)."""
        hk = batch.housekeeping  # the executor may have raised before applying it
        self.pending.redeliver(hk)
        failed = []
        if batch.step == self._next_step - 1:  # the latest batch: undo its turn
            self.scheduler.undo_fairness()
        if batch is self._scheduled:
            self._scheduled = None
        for item in batch.items:
            req = self.requests.get(item.request_id)
            if req is not None and req.generation == item.generation:
                req.error = error
                self._finish(req, "error")
                failed.append(req.request_id)
        return failed

    # ---- apply helpers -------------------------------------------------------------------
    def _apply_prelude(self, req: Request) -> None:
        req.stage = Stage.RECURRENT
        req.num_depths_done = 0
        assert req.decider is not None
        req.decider.start_token(req.num_output_tokens)
        self.scheduler.requeue(req)

    def _apply_decode(self, req: Request, item: ScheduledItem, signal: float | None) -> None:
        alloc = req.kv
        assert alloc is not None
        self.block_manager.mark_token(alloc, item.depth, item.position)
        req.num_depths_done = num_done = item.depth + 1
        assert req.decider is not None
        if not req.decider.after_depth(num_done, signal):
            self.scheduler.recurrent.append(req)  # its next depth
            return
        targets = self.block_manager.finalize(alloc, item.position, item.depth)
        if targets:
            self.pending.finalize.append(
                FinalizeOp(req.request_id, req.generation, item.position, item.depth, targets)
            )
        req.stage = Stage.CODA
        self.scheduler.requeue(req)

    def _apply_prompt(self, req: Request, item: ScheduledItem) -> None:
        if req.prompt_chunks:  # the wavefront arm
            assert self._advance_chunk is not None
            if self._advance_chunk(self.scheduler, req, item):
                self._prompt_done(req)
            return
        alloc = req.kv
        assert alloc is not None
        start = item.position
        end = start + item.num_tokens
        last_depth = item.depth + item.num_depths
        for d in range(item.depth, last_depth):
            self.block_manager.mark_range(alloc, d, start, end)
        p = req.prompt_item
        if p is not None:
            p.depth = last_depth
            p.embedded = True
        if last_depth < self.num_depths:
            self.scheduler.requeue(req)
            return
        if p is not None and p.state is not None:
            self.prompt_states.release(p.state)
        req.prompt_item = None
        if req.block_hashes:
            # Every plane of [0, end) is written: its full prompt blocks can be shared.
            self.block_manager.publish(alloc.key, req.block_hashes, end)
        req.num_prefilled_tokens = end
        req.position = end
        if end < req.num_prompt_tokens:
            self.scheduler.next_chunk(req)
            return
        self._prompt_done(req)

    def _prompt_done(self, req: Request) -> None:
        req.num_depths_done = self.num_depths
        req.position = req.num_prompt_tokens - 1  # CODA samples from the last prompt position
        req.stage = Stage.CODA
        self.scheduler.requeue(req)

    def _apply_coda(self, req: Request, token_id: int, now: float,
                    logprobs: TokenLogprobs | None = None) -> TokenEvent:
        index = req.num_output_tokens
        exit_depth = self.num_depths if index == 0 else req.num_depths_done
        req.output_token_ids.append(int(token_id))
        req.exit_depths.append(exit_depth)
        if logprobs is not None:
            req.output_logprobs.append(logprobs)
        req.position = req.num_prompt_tokens + index  # where this new token will run
        if index == 0:
            req.first_token_s = now
        reason = req.finish_reason_after(int(token_id))
        if reason is not None:
            self._finish(req, reason)
        else:
            req.stage = Stage.PRELUDE
            self.scheduler.requeue(req)
        return TokenEvent(
            req.request_id, index, now, int(token_id), exit_depth, reason is not None, reason,
            logprobs,
        )

    def _finish(self, req: Request, reason: str) -> None:
        self.scheduler.remove(req)
        if req.prompt_item is not None and req.prompt_item.state is not None:
            self.prompt_states.release(req.prompt_item.state)
            req.prompt_item = None
        if req.prompt_chunks:
            assert self._release_chunks is not None
            self._release_chunks(self.scheduler, req)
        key = (req.request_id, req.generation)
        if self.block_manager.holds(key):
            self.block_manager.free(key)
            self.pending.released_requests.append(key)
        req.kv = None
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        req.finish_s = self._now
        self.requests.pop(req.request_id, None)
        self._finished.append(req)
