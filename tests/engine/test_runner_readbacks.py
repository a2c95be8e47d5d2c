"""The runner reads results back only where RFC §4 allows: one readback for a step whose
decode rows need an exit signal (gate or lookahead scores), one for a CODA step's tokens,
and none otherwise (fixed-depth and prompt-only core calls, prelude steps)."""

from __future__ import annotations

import pytest

from engine.core import ExitConfig, SamplingParams
from engine.core.batch import Batch, ItemKind
from engine.core.request import Stage
from engine.core.results import step_kind
from tests.reference.fixtures import make_llm, tiny_model

PROMPTS = [[3, 1, 4], list(range(10, 31)), [9, 9, 8, 2, 6, 1], [5] * 13]
MODES = {
    "fixed": ExitConfig(mode="fixed"),
    "ouro": ExitConfig(mode="ouro", exit_threshold=0.5),
    "random_lookahead": ExitConfig(mode="random_lookahead", exit_threshold=0.5, seed=7),
}


def _steps(arm: str, mode: str) -> list[tuple[Batch, int]]:
    llm = make_llm(tiny_model(gate_std=0.6), arm, MODES[mode])
    steps: list[tuple[Batch, int]] = []
    inner = llm.runner.execute

    def execute(batch: Batch):  # type: ignore[no-untyped-def]
        result = inner(batch)
        steps.append((batch, llm.runner.readbacks.last_step))
        return result

    llm.runner.execute = execute  # type: ignore[method-assign]
    # Greedy and sampled rows share CODA steps; one request stays fixed-depth beside the others.
    params = [SamplingParams(max_tokens=6, temperature=0.8 * (i % 2), seed=i,
                             exit=ExitConfig(mode="fixed") if i == 2 else None)
              for i in range(len(PROMPTS))]
    llm.generate(PROMPTS, params)
    assert llm.runner.readbacks.total == sum(n for _, n in steps)
    return steps


def _allowed(batch: Batch) -> int:
    if batch.stage is Stage.CODA:
        return 1
    adaptive = any(it.kind is ItemKind.DECODE and it.needs_signal for it in batch.items)
    return 1 if batch.stage is Stage.RECURRENT and adaptive else 0


@pytest.mark.parametrize("arm", ["atomic", "per_depth", "mixed"])
@pytest.mark.parametrize("mode", list(MODES))
def test_readbacks_per_step_are_what_rfc4_allows(arm: str, mode: str) -> None:
    steps = _steps(arm, mode)
    for batch, n in steps:
        assert n == _allowed(batch), (step_kind(batch), batch.step, n)
    kinds = {step_kind(b) for b, _ in steps}
    assert "coda" in kinds and ("prefill" in kinds or "prompt" in kinds)
    if arm == "mixed":
        mixed = [n for b, n in steps if b.is_mixed]
        assert mixed, "the mixed arm ran no mixed step"
        if mode == "fixed":
            assert set(mixed) == {0}
        else:
            assert 1 in mixed


@pytest.mark.parametrize("mode", ["fixed", "ouro"])
def test_steps_record_the_runners_readbacks_and_the_simulator_rfc4s(mode: str) -> None:
    """Steps data carries ``num_readbacks``: what the runner did in each step on a real
    run, the count RFC §4 allows (``rfc_readbacks``) in simulation; the two agree."""
    from engine.core.records import ArrivalSpec
    from engine.core.results import rfc_readbacks
    from engine.llm import build_runner, make_engine_config
    from engine.realtime import run_realtime
    from tests.helpers import ListSource

    model = tiny_model(gate_std=0.6)
    cfg = make_engine_config(model, arm="mixed", exit=MODES[mode],
                             max_num_seqs=4, max_num_batched_tokens=64, prefill_chunk_size=16,
                             num_blocks=256)
    specs = [ArrivalSpec(f"r{i}", tuple(p), SamplingParams(max_tokens=5, ignore_eos=True),
                         arrival_s=0.0) for i, p in enumerate(PROMPTS)]
    runner = build_runner(model, cfg)
    counts: list[int] = []
    batches: list[Batch] = []
    inner = runner.execute

    def execute(batch: Batch):  # type: ignore[no-untyped-def]
        result = inner(batch)
        counts.append(runner.readbacks.last_step)
        batches.append(batch)
        return result

    runner.execute = execute  # type: ignore[method-assign]
    records = run_realtime(cfg, ListSource(specs), runner)
    assert [s.num_readbacks for s in records.steps] == counts
    assert sum(counts) == runner.readbacks.total > 0
    assert [rfc_readbacks(b) for b in batches] == counts
    if mode == "fixed":
        assert {s.num_readbacks for s in records.steps if s.kind != "coda"} == {0}
    else:
        assert any(s.num_readbacks for s in records.steps if s.kind != "coda")


def _knob_steps(arm: str, mode: str, readback_skip: bool) -> list[tuple[Batch, int]]:
    llm = make_llm(tiny_model(gate_std=0.6), arm, ExitConfig(mode=mode, exit_threshold=1.0),
                   readback_skip=readback_skip)
    steps: list[tuple[Batch, int]] = []
    inner = llm.runner.execute

    def execute(batch: Batch):  # type: ignore[no-untyped-def]
        result = inner(batch)
        steps.append((batch, llm.runner.readbacks.last_step))
        return result

    llm.runner.execute = execute  # type: ignore[method-assign]
    llm.generate(PROMPTS, [SamplingParams(max_tokens=5, ignore_eos=True)] * len(PROMPTS))
    return steps


@pytest.mark.parametrize("arm", ["atomic", "per_depth", "mixed"])
@pytest.mark.parametrize("mode", ["ouro", "ouro_delayed", "random_lookahead"])
def test_readback_skip_off_reads_the_unused_signal_on_every_decode_loop(
        arm: str, mode: str) -> None:
    """RFC §4 at threshold 1.0: with the skip (the default) only CODA steps read back; with
    it off every step holding decode rows in the loop reads their unused signal back once,
    prompt-only and prelude steps still never do, and the tokens are the same."""
    on, off = _knob_steps(arm, mode, True), _knob_steps(arm, mode, False)
    assert [(b.stage, b.num_decode_items) for b, _ in on] == [
        (b.stage, b.num_decode_items) for b, _ in off]
    for batch, n in on:
        assert n == (1 if batch.stage is Stage.CODA else 0), (step_kind(batch), n)
    decode_loops = 0
    for batch, n in off:
        loops = batch.stage is Stage.RECURRENT and batch.num_decode_items > 0
        decode_loops += loops
        assert n == (1 if batch.stage is Stage.CODA or loops else 0), (step_kind(batch), n)
    assert decode_loops > 0
    if arm == "mixed":
        assert any(b.is_mixed and n == 1 for b, n in off)
