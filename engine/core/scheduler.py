"""The scheduler: admission, the stage queues, the fairness counter and the policy that
composes the take helpers into a batch (docs/design.md).

Taken requests leave their queue while their batch is in flight; ``EngineCore.apply`` hands
them back (``requeue``). Prompt work returns to its admission-order position, so an item that
just ran a depth never loses its place to younger prompts (RFC §2).
"""

from __future__ import annotations

from engine.core.admission import WaitingQueue
from engine.core.batch import ItemKind, ScheduledItem
from engine.core.block_manager import BlockManager
from engine.core.config import EngineConfig
from engine.core.prompt_state import PromptStateHandles
from engine.core.request import PromptItem, Request, RequestStatus, Stage

Selection = tuple[Stage, list[ScheduledItem]]
_ONE_ITEM_ARMS = frozenset({"per_depth", "mixed"})  # one PromptItem per request


class Policy:
    """Chooses the next batch from the scheduler's queues, or None when nothing is ready.

    Policies never read a clock; admission happens inside ``select`` at the point each arm's
    order prescribes (``engine.core.policies``). A base class rather than a Protocol so
    compiled callers dispatch through a vtable.
    """

    def select(self, s: Scheduler) -> Selection | None:
        """Pop the next batch's work from the queues."""
        raise NotImplementedError


class Scheduler:
    """Waiting and running requests, queues per stage, and the selection primitives shared
    by the arms; ``schedule`` asks the policy for the next batch's work."""

    def __init__(
        self,
        cfg: EngineConfig,
        block_manager: BlockManager,
        prompt_states: PromptStateHandles,
        policy: Policy,
    ) -> None:
        self.cfg = cfg
        self.sched = sched = cfg.scheduler
        self.num_depths = cfg.model.num_depths
        # The frozen config's fields read every step, kept as typed attributes: compiled, a
        # config field is a generic attribute lookup and a boxed value each time.
        self.max_num_seqs: int = sched.max_num_seqs
        self.max_num_batched_tokens: int = sched.max_num_batched_tokens
        self.min_coda_batch_size: int = sched.min_coda_batch_size
        self.max_prefill_batches_before_decode: int = sched.max_prefill_batches_before_decode
        self.effective_chunk_size: int = sched.effective_chunk_size
        self.prompt_shortcut: bool = sched.prompt_shortcut
        self.read_always: bool = not sched.readback_skip
        self.incremental_allocation: bool = cfg.cache.incremental_allocation
        self.one_item_arm: bool = sched.arm in _ONE_ITEM_ARMS
        self.new_item_per_chunk: bool = sched.arm != "atomic"
        self.block_manager = block_manager
        self.prompt_states = prompt_states
        self.policy = policy
        self.waiting = WaitingQueue(cfg.scheduler)
        self.running: dict[str, Request] = {}
        self.prefill: list[Request] = []  # admission order (admitted_seq)
        # Lists, not deques: bounded by max_num_seqs, and compiled code reaches list
        # operations directly.
        self.prelude: list[Request] = []
        self.recurrent: list[Request] = []
        self.coda: list[Request] = []
        # The request of each item of the latest selection, in item order (what ``apply``
        # reads instead of looking each item's request up by id).
        self.taken: list[Request] = []
        self.prefill_batches_since_decode = 0
        self._fairness_before = 0  # the counter before the latest selection
        self._next_admission = 0
        self._now = 0.0

    # ---- the step ------------------------------------------------------------------------
    def schedule(self, now: float) -> Selection | None:
        """The next batch's stage and items, taken from the queues; None when nothing runs."""
        self._now = now
        self.taken.clear()
        before = self.prefill_batches_since_decode
        sel = self.policy.select(self)
        if sel is None or not sel[1]:
            return None
        self._fairness_before = before
        return sel

    def undo_fairness(self) -> None:
        """Put the prefill/decode alternation back to before the latest selection (its batch
        failed: a failed prefill does not use up decode's turn, a failed decode batch leaves
        decode due)."""
        self.prefill_batches_since_decode = self._fairness_before

    # ---- queue maintenance ---------------------------------------------------------------
    def add(self, req: Request) -> None:
        """Queue a new request for admission."""
        self.waiting.push(req)

    def requeue(self, req: Request) -> None:
        """Hand a request whose work was applied back to the queue of its stage."""
        stage = req.stage
        if stage is Stage.RECURRENT:
            self.recurrent.append(req)
        elif stage is Stage.PRELUDE:
            self.prelude.append(req)
        elif stage is Stage.CODA:
            self.coda.append(req)
        else:
            self.enqueue_prefill(req)

    def next_chunk(self, req: Request) -> None:
        """Queue a request's next prompt chunk (a new prompt item under A1 and A2)."""
        if self.new_item_per_chunk:
            self._new_prompt_item(req)
        self.enqueue_prefill(req)

    def enqueue_prefill(self, req: Request) -> None:
        """Insert ``req`` in admission order (after any equal ``admitted_seq``)."""
        queue = self.prefill
        seq = req.admitted_seq
        i = len(queue)
        while i > 0 and queue[i - 1].admitted_seq > seq:  # mostly at or near the tail
            i -= 1
        queue.insert(i, req)

    def remove(self, req: Request) -> None:
        """Forget a finishing request, waiting or running."""
        if req.status is RequestStatus.WAITING:
            self.waiting.remove(req)
        else:
            for q in (self.prelude, self.recurrent, self.coda):
                if req in q:
                    q.remove(req)
            if req in self.prefill:
                self.prefill.remove(req)
        self.running.pop(req.request_id, None)

    # ---- admission -----------------------------------------------------------------------
    def admit(self) -> None:
        """Admit waiting requests into free slots (``WaitingQueue.admit``'s order and bypass
        rule); each claims its KV blocks and joins the prefill queue."""
        free_slots = self.max_num_seqs - len(self.running)
        if free_slots <= 0 or not self.waiting:
            return  # what ``WaitingQueue.admit`` returns then, without its call per step
        for req in self.waiting.admit(free_slots, self._try_admit):
            req.status = RequestStatus.RUNNING
            req.stage = Stage.PREFILL
            req.admitted_seq = self._next_admission
            req.admitted_s = self._now
            self._next_admission += 1
            self.running[req.request_id] = req
            if self.one_item_arm:  # wavefront chunks start when scheduled
                self._new_prompt_item(req)
            self.enqueue_prefill(req)

    def _try_admit(self, req: Request) -> bool:
        """Claim the request's KV after the longest cached prefix of its prompt (prefix
        caching), whose positions it then skips."""
        key = (req.request_id, req.generation)
        bm = self.block_manager
        prefix = bm.cached_prefix(req.block_hashes, req.num_prompt_tokens)
        hit = len(prefix) * bm.block_size
        if self.incremental_allocation:
            now = min(req.num_prompt_tokens, hit + self.effective_chunk_size)
        else:
            now = req.lifetime_tokens
        if not bm.allocate(key, now, req.lifetime_tokens, prefix):
            return False
        req.kv = bm.allocation(key)
        if bm.prefix_cache is not None:
            bm.prefix_cache.stats.record(req.num_prompt_tokens, hit)
        if hit:
            # The prompt's work starts after the hit (atomic chunks and prompt items read it).
            req.num_cached_tokens = req.num_prefilled_tokens = req.position = hit
        return True

    def _new_prompt_item(self, req: Request) -> None:
        start = req.num_prefilled_tokens
        count = min(self.effective_chunk_size, req.num_prompt_tokens - start)
        handle = self.prompt_states.acquire(req.request_id, req.generation)
        req.prompt_item = PromptItem(start, count, state=handle)

    # ---- readiness -----------------------------------------------------------------------
    def coda_ready(self) -> bool:
        if not self.coda:
            return False
        return len(self.coda) >= self.min_coda_batch_size or not self.recurrent

    def decode_due(self) -> bool:
        return bool(self.recurrent) and (
            self.prefill_batches_since_decode >= self.max_prefill_batches_before_decode
        )

    # ---- takes ---------------------------------------------------------------------------
    def _grow(self, req: Request, num_tokens: int) -> None:
        if self.incremental_allocation and not self.block_manager.ensure_capacity(
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
        self.taken += queue
        queue.clear()
        return items

    def take_coda(self) -> list[ScheduledItem]:
        queue = self.coda
        count = min(self.max_num_seqs, len(queue))
        decode = ItemKind.DECODE
        taken = self.taken
        items: list[ScheduledItem] = []
        for i in range(count):
            req = queue[i]
            taken.append(req)
            items.append(ScheduledItem(
                req.request_id, req.generation, decode, req.position, 1, 0, 0,
                params=req.params, output_index=len(req.output_token_ids),
            ))
        del queue[:count]
        return items

    def take_decode(self, budget: int) -> list[ScheduledItem]:
        """Decode items from the RECURRENT queue head, up to max_num_seqs and ``budget`` rows."""
        queue = self.recurrent
        # Two-argument mins: compiled, min of three is a generic call on boxed ints.
        count = min(min(self.max_num_seqs, budget), len(queue))
        items: list[ScheduledItem] = []
        taken = self.taken
        incremental = self.incremental_allocation
        read_always = self.read_always
        decode = ItemKind.DECODE
        for i in range(count):
            req = queue[i]
            taken.append(req)
            depth = req.num_depths_done
            if incremental and depth == 0:
                self._grow(req, req.position + 1)
            decider = req.decider
            assert decider is not None
            items.append(ScheduledItem(
                req.request_id, req.generation, decode, req.position, 1, depth, 1,
                decider.needs_signal(depth) or (read_always and decider.computes_signal),
                signal_head=decider.signal_head,
            ))
        del queue[:count]
        return items

    def take_prompts(self, budget: int, *, to_last_depth: bool = False) -> list[ScheduledItem]:
        """Whole prompt items in admission order; stop at the first that does not fit."""
        items: list[ScheduledItem] = []
        queue = self.prefill
        prompt = ItemKind.PROMPT
        num_depths = self.num_depths
        for req in queue:
            p = req.prompt_item
            assert p is not None
            count = p.token_count
            if count > budget:
                break
            budget -= count
            start = p.token_start
            end = start + count
            depth = p.depth
            if depth == 0:
                self._grow(req, end)
            embedded = p.embedded
            items.append(ScheduledItem(
                req.request_id, req.generation, prompt, start, count, depth,
                num_depths - depth if to_last_depth else 1, False, not embedded,
                () if embedded else req.prompt_token_ids[start:end], p.state, p,
                end == len(req.prompt_token_ids),
            ))
        # The taken requests are the queue's head: it stops at the first that does not fit.
        num_taken = len(items)
        self.taken += queue[:num_taken]
        del queue[:num_taken]
        return items

    def take_atomic_prefill(self, budget: int) -> list[ScheduledItem]:
        """A0: chunks (clamped to the remaining budget) that run all D depths in this step."""
        items: list[ScheduledItem] = []
        queue = self.prefill
        for req in queue:
            if budget <= 0:
                break
            start = req.num_prefilled_tokens
            count = min(min(self.effective_chunk_size, req.num_prompt_tokens - start), budget)
            budget -= count
            self._grow(req, start + count)
            items.append(
                ScheduledItem(
                    req.request_id, req.generation, ItemKind.PROMPT, start, count,
                    depth=0, num_depths=self.num_depths, fused_prelude=True,
                    token_ids=req.prompt_token_ids[start:start + count],
                    is_last_chunk=start + count == req.num_prompt_tokens,
                )
            )
        # The taken requests are the queue's head: it stops when the budget runs out.
        num_taken = len(items)
        self.taken += queue[:num_taken]
        del queue[:num_taken]
        return items
