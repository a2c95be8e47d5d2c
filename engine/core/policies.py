"""The four arms (docs/design.md). A policy picks one batch's stage and items per step
(``engine.core.scheduler.Policy``); ``Scheduler.schedule`` calls it."""

from __future__ import annotations

from engine.core.batch import ScheduledItem
from engine.core.request import Stage
from engine.core.scheduler import Policy, Scheduler, Selection


def _decode(s: Scheduler) -> Selection:
    s.prefill_batches_since_decode = 0
    return Stage.RECURRENT, s.take_decode(s.max_num_batched_tokens)


class _AlternatingPolicy(Policy):
    """PRELUDE, ready CODA, decode-due RECURRENT, admit, prompt work, RECURRENT: prompt batches
    alternate with decode batches (``max_prefill_batches_before_decode``)."""

    def _take_prompt_work(self, s: Scheduler) -> Selection | None:
        raise NotImplementedError

    def select(self, s: Scheduler) -> Selection | None:
        if s.prelude:
            return Stage.PRELUDE, s.take_prelude()
        if s.coda_ready():
            return Stage.CODA, s.take_coda()
        if s.decode_due():
            return _decode(s)
        s.admit()
        if s.prefill:
            selection = self._take_prompt_work(s)
            if selection is not None and selection[1]:
                s.prefill_batches_since_decode += 1
                return selection
        if s.recurrent:
            return _decode(s)
        return None


class AtomicPolicy(_AlternatingPolicy):
    """A0: a PREFILL batch runs its chunks through all D depths in one step."""

    def _take_prompt_work(self, s: Scheduler) -> Selection | None:
        return Stage.PREFILL, s.take_atomic_prefill(s.max_num_batched_tokens)


class PerDepthPolicy(_AlternatingPolicy):
    """A1: prompt items advance one depth per step in prompt-only RECURRENT batches."""

    def _take_prompt_work(self, s: Scheduler) -> Selection | None:
        return Stage.RECURRENT, s.take_prompts(s.max_num_batched_tokens)


class MixedPolicy(Policy):
    """A2: one RECURRENT core call takes decode items first, then whole prompt items in
    admission order up to the token budget (RFC §2). No ``decode_due``: prompt items never
    displace a ready decode item.

    With ``prompt_shortcut`` (RFC open question 3), a step with no decode item ready runs the
    prompt items' remaining depths at once (stage PREFILL).
    """

    def _take_prompt_items(self, s: Scheduler, budget: int) -> list[ScheduledItem]:
        """The prompt items that ride with the decode items, within ``budget`` tokens."""
        return s.take_prompts(budget)

    def select(self, s: Scheduler) -> Selection | None:
        if s.prelude:
            return Stage.PRELUDE, s.take_prelude()
        if s.coda_ready():
            return Stage.CODA, s.take_coda()
        s.admit()
        budget = s.max_num_batched_tokens
        items = s.take_decode(budget)
        if not items and s.prompt_shortcut and s.prefill:
            prompts = s.take_prompts(budget, to_last_depth=True)
            return (Stage.PREFILL, prompts) if prompts else None
        items += self._take_prompt_items(s, budget - len(items))
        return (Stage.RECURRENT, items) if items else None


class WavefrontPolicy(MixedPolicy):
    """A3: mixed batching where a request may hold several prompt items at once, at
    different depths (``engine.core.wavefront``): decode items first, then ready (chunk,
    depth) items in admission order and chunk order, while they fit the token budget (the
    config refuses ``prompt_shortcut`` for this arm)."""

    def __init__(self) -> None:
        from engine.core import wavefront  # loaded only by the wavefront arm's runs

        self._take_chunks = wavefront.take_chunks

    def _take_prompt_items(self, s: Scheduler, budget: int) -> list[ScheduledItem]:
        return self._take_chunks(s, budget)


def make_policy(arm: str) -> Policy:
    policies: dict[str, type[Policy]] = {
        "atomic": AtomicPolicy,
        "per_depth": PerDepthPolicy,
        "mixed": MixedPolicy,
        "wavefront": WavefrontPolicy,
    }
    return policies[arm]()
