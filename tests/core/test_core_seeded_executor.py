"""The seeded executor: its token and signal streams (keyed by request, position and depth,
so any batching gives the same values), EOS, and the prompt-state handle contract."""

from __future__ import annotations

import pytest

from engine.core import Batch, ItemKind, ScheduledItem, Stage
from engine.core.batch import Housekeeping
from engine.core.exits import stable_seed
from engine.core.request import PromptStateHandle
from engine.core.seeded_executor import SeededExecutor


def _coda(step: int, ids: list[str], hk: Housekeeping | None = None) -> Batch:
    items = tuple(ScheduledItem(rid, 0, ItemKind.DECODE, 20 + i, 1, num_depths=0)
                  for i, rid in enumerate(ids))
    return Batch(step, Stage.CODA, items, hk)


def test_tokens_are_the_seeded_stream_and_avoid_eos() -> None:
    ids = [f"r{i}" for i in range(64)]
    tokens = SeededExecutor(seed=9, vocab_size=16).execute(_coda(3, ids)).token_ids  # type: ignore[attr-defined]
    assert list(tokens) == [stable_seed(9, "token", rid, 20 + i) % 16 for i, rid in enumerate(ids)]
    # Batched differently (one per step, another order): the same token per (request, position).
    ex = SeededExecutor(seed=9, vocab_size=16)
    assert [ex.token(rid, 20 + i) for i, rid in reversed(list(enumerate(ids)))] == list(
        reversed(tokens))
    no_eos = SeededExecutor(seed=9, vocab_size=16, eos_token_id=5).execute(_coda(3, ids))
    assert 5 in tokens and 5 not in no_eos.token_ids  # type: ignore[attr-defined]
    asked = SeededExecutor(seed=9, vocab_size=16, eos_token_id=5,
                           eos_fn=lambda rid, pos: rid == "r0").execute(_coda(3, ids))
    assert asked.token_ids[0] == 5  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="vocab_size"):
        SeededExecutor(vocab_size=1)


def test_signals_only_when_a_decode_row_needs_one() -> None:
    ex = SeededExecutor(signal_fn=lambda rid, pos, d: 0.25 + d / 10)
    plain = Batch(0, Stage.RECURRENT, (ScheduledItem("a", 0, ItemKind.DECODE, 5, 1, depth=1),))
    assert ex.execute(plain).decode_signals is None  # type: ignore[attr-defined]
    needs = Batch(1, Stage.RECURRENT, (
        ScheduledItem("a", 0, ItemKind.DECODE, 5, 1, depth=1, needs_signal=True),
        ScheduledItem("b", 0, ItemKind.DECODE, 5, 1, depth=2),
        ScheduledItem("p", 0, ItemKind.PROMPT, 0, 8, depth=0),
    ))
    signals = ex.execute(needs).decode_signals  # type: ignore[attr-defined]
    assert signals == (pytest.approx(0.35), 0.0)
    assert ex.num_signals_read == 2


def test_default_signals_are_the_seeded_uniform_stream() -> None:
    items = tuple(ScheduledItem(f"r{i}", 0, ItemKind.DECODE, 7 + i, 1, depth=i % 4,
                                needs_signal=True) for i in range(8))
    signals = SeededExecutor(seed=4).execute(Batch(0, Stage.RECURRENT, items)).decode_signals  # type: ignore[attr-defined]
    assert list(signals) == [
        (stable_seed(4, "signal", it.request_id, it.position, it.depth) >> 11) / float(1 << 53)
        for it in items]


def test_a_released_prompt_state_must_not_run_again() -> None:
    ex = SeededExecutor()
    handle = PromptStateHandle(3, "p", 0)
    prompt = ScheduledItem("p", 0, ItemKind.PROMPT, 0, 8, prompt_state=handle)
    ex.execute(Batch(0, Stage.RECURRENT, (prompt,)))
    assert ex.live_handles == {3}
    # The release arrives with a CODA batch: it counts all the same.
    ex.execute(_coda(1, ["q"], Housekeeping(released_handles=(handle,))))
    assert ex.live_handles == set() and ex.released_handles == {3}
    with pytest.raises(RuntimeError, match="released prompt state"):
        ex.execute(Batch(2, Stage.RECURRENT, (prompt,)))


def test_another_engine_gets_the_same_streams_and_its_own_handles() -> None:
    ex = SeededExecutor(seed=2, vocab_size=32)
    handle = PromptStateHandle(0, "p", 0)
    ex.execute(_coda(0, ["q"], Housekeeping(released_handles=(handle,))))
    other = ex.for_another_engine()
    assert other.token("q", 20) == ex.token("q", 20)
    assert other.signal_fn is ex.signal_fn and other.released_handles == set()
    # Handle 0 of the other engine's own numbering runs there.
    other.execute(Batch(1, Stage.RECURRENT, (
        ScheduledItem("p", 0, ItemKind.PROMPT, 0, 8, prompt_state=handle),)))


def test_signals_and_prompt_states_whatever_the_item_order() -> None:
    """Decode items come first in a scheduled batch; a batch built otherwise still gets one
    signal per decode item in order and has every prompt item's state checked."""
    ex = SeededExecutor(signal_fn=lambda rid, pos, d: pos + d / 10)
    released = PromptStateHandle(7, "p2", 0)
    ex.execute(_coda(0, ["q"], Housekeeping(released_handles=(released,))))
    items = (
        ScheduledItem("p1", 0, ItemKind.PROMPT, 0, 8, prompt_state=PromptStateHandle(1, "p1", 0)),
        ScheduledItem("a", 0, ItemKind.DECODE, 5, 1, depth=1, needs_signal=True),
        ScheduledItem("p3", 0, ItemKind.PROMPT, 0, 4, prompt_state=PromptStateHandle(3, "p3", 0)),
        ScheduledItem("b", 0, ItemKind.DECODE, 6, 1, depth=2),
        ScheduledItem("c", 0, ItemKind.DECODE, 7, 1, depth=3, needs_signal=True),
    )
    signals = ex.execute(Batch(1, Stage.RECURRENT, items)).decode_signals  # type: ignore[attr-defined]
    assert signals == (pytest.approx(5.1), 0.0, pytest.approx(7.3))
    assert ex.live_handles == {1, 3} and ex.num_signals_read == 3
    late = ScheduledItem("p2", 0, ItemKind.PROMPT, 0, 4, prompt_state=released)
    with pytest.raises(RuntimeError, match="released prompt state"):
        ex.execute(Batch(2, Stage.RECURRENT, (late, *items)))
