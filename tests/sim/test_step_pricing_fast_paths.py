"""The per-step pricing fast paths give the reference's doubles on random batches of every
stage: the roofline's one-pass ``batch_time`` against a call-by-call walk over
``Batch.core_call_items`` and against ``breakdown``; the step clock's direct roofline call and
its reused ``StepContext`` against a fresh context per step."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import Batch, ItemKind, ScheduledItem, Stage
from engine.core.batch import FinalizeOp, Housekeeping
from engine.core.shapes import OURO_1_4B, TINY
from sim.cost import RooflineCost, make_cost_model
from sim.cost.base import StepContext, Waits, get_hardware, item_context
from sim.step_clock import StepClock

ROOFLINES = [make_cost_model("roofline", shape, hardware=hw)
             for shape in (TINY, OURO_1_4B) for hw in ("h200", "cpu")]


def _reference_s(cost: RooflineCost, batch: Batch) -> float:
    """The roofline written call by call, as its model docstring states it."""
    if batch.stage in (Stage.PRELUDE, Stage.CODA):
        return cost._cost(batch, None)
    hw = cost.hardware
    total = hw.step_overhead_s + cost._finalize_s(batch.housekeeping.finalize)
    if batch.needs_signals:
        total += hw.readback_s
    for k, call in enumerate(batch.core_call_items()):
        rows = kv_tokens = ctx_sum = fused_rows = 0
        for item, _depth in call:
            kv, ctx, _ = item_context(item)
            rows += item.num_tokens
            kv_tokens += kv
            ctx_sum += ctx
            fused_rows += item.num_tokens if k == 0 and item.fused_prelude else 0
        total += cost._call_s(rows, kv_tokens, ctx_sum, fused_rows)
    return total


@st.composite
def _items(draw: st.DrawFn, stage: Stage) -> tuple[ScheduledItem, ...]:
    out = []
    for i in range(draw(st.integers(0 if stage is Stage.RECURRENT else 1, 12))):
        depth = draw(st.integers(0, 3))
        # several calls: an atomic PREFILL step (any item kind, to cover every branch)
        num_depths = draw(st.integers(1, 4)) if stage is Stage.PREFILL else 1
        if draw(st.booleans()):
            out.append(ScheduledItem(f"d{i}", 0, ItemKind.DECODE, draw(st.integers(0, 5000)),
                                     1, depth=depth, num_depths=num_depths,
                                     needs_signal=draw(st.booleans())))
            continue
        fused = depth == 0 and draw(st.booleans())
        out.append(ScheduledItem(f"p{i}", 0, ItemKind.PROMPT, draw(st.integers(0, 4000)),
                                 draw(st.integers(1, 300)), depth=depth,
                                 num_depths=num_depths, fused_prelude=fused))
    return tuple(out)


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    stage = draw(st.sampled_from(list(Stage)))
    copies = draw(st.lists(st.lists(st.integers(1, 3), max_size=3), max_size=3))
    ops = tuple(FinalizeOp(f"f{i}", 0, 7, 0, tuple(c)) for i, c in enumerate(copies))
    return Batch(draw(st.integers(0, 9)), stage, draw(_items(stage)), Housekeeping(ops))


@settings(max_examples=300, deadline=None)
@given(batch=batches())
def test_roofline_batch_time_is_the_call_by_call_price(batch: Batch) -> None:
    for cost in ROOFLINES:
        assert isinstance(cost, RooflineCost)
        fast = cost.batch_time(batch)
        assert fast == _reference_s(cost, batch)  # the same doubles, not approximately
        assert fast == cost.breakdown(batch)["total_s"] == cost.step_time(StepContext(batch))


def test_the_random_batches_cover_every_path() -> None:
    # the fast path's branches: one call with decode, prompt and fused rows, several calls
    # of unequal depth counts, finalize copies and readbacks
    prefill = Batch(0, Stage.PREFILL, (
        ScheduledItem("a", 0, ItemKind.PROMPT, 0, 9, num_depths=4, fused_prelude=True),
        ScheduledItem("b", 0, ItemKind.PROMPT, 30, 5, num_depths=2)),
        Housekeeping((FinalizeOp("c", 0, 3, 0, (1, 2)),)))
    mixed = Batch(1, Stage.RECURRENT, (
        ScheduledItem("d", 0, ItemKind.DECODE, 99, 1, depth=2, needs_signal=True),
        ScheduledItem("e", 0, ItemKind.PROMPT, 0, 17, fused_prelude=True)))
    for cost in ROOFLINES:
        assert isinstance(cost, RooflineCost)
        for b in (prefill, mixed):
            assert cost.batch_time(b) == _reference_s(cost, b)
    assert prefill.num_core_calls == 4 and mixed.needs_signals


class _Fresh:
    """The roofline behind a Python-level call, checking each context as the clock hands it
    over: the fields of this step, whatever the clock did with it before."""

    def __init__(self, cost: RooflineCost) -> None:
        self.cost, self.prev = cost, None
        self.waits = Waits()
        self.seen: list[tuple[int, float, int]] = []

    def step_time(self, ctx: StepContext) -> float:
        assert ctx.prev is self.prev
        self.prev = ctx.batch  # type: ignore[assignment]
        self.seen.append((ctx.batch.step, ctx.idle_s, ctx.since_idle))
        return self.cost.step_time(StepContext(ctx.batch, ctx.prev, ctx.idle_s,
                                               ctx.since_idle))

    def breakdown(self, batch: Batch) -> dict[str, float]:
        return self.cost.breakdown(batch)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(batches(), st.sampled_from([0.0, 0.0, 1e-3, 2.5])),
                      min_size=1, max_size=8))
def test_the_clock_prices_like_a_fresh_context_per_step(
        steps: list[tuple[Batch, float]]) -> None:
    roofline = RooflineCost(OURO_1_4B, get_hardware("h200"), 2)
    direct, wrapped = StepClock(roofline, 0.0), StepClock(_Fresh(roofline), 0.0)
    start = 0.0
    for batch, gap in steps:
        start = direct.last_end + gap
        end = direct.end_of(batch, start)
        assert wrapped.end_of(batch, start) == end
        assert direct.duration == wrapped.duration == roofline.batch_time(batch)
    wrapper = wrapped.cost
    assert isinstance(wrapper, _Fresh) and len(wrapper.seen) == len(steps)
    assert wrapper.seen[-1][1:] == (direct.waits.idle_s, direct.waits.since_idle)
