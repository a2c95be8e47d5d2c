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
