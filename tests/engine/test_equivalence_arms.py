"""A0, A1, A2 and A3 give the same tokens and exit depths, equal to one-request-at-a-time
runs."""

from __future__ import annotations

import pytest

from engine.core import ExitConfig, SamplingParams
from engine.core.batch import Batch, ItemKind
from engine.llm import LLM
from tests.reference.fixtures import ARMS, make_llm, outputs_key, serial, tiny_model

PROMPTS = [
    [3, 1, 4],
    list(range(10, 21)),
    [7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5, 2, 3],
    [9, 9, 8, 2, 6, 1],
    [(5 * i) % 64 for i in range(20)],
]
TRACES = [
    (4, 2, 1, 3, 4, 1, 2),
    (4, 4, 4, 4, 4, 4, 4),
    (4, 1, 1, 2, 3, 4, 1),
    (4, 3, 2, 1, 3, 2, 1),
    (4, 2, 2, 3, 1, 4, 2),
]
FIXED = ExitConfig(mode="fixed")
MODES = {
    "fixed": FIXED,
    "ouro": ExitConfig(mode="ouro", exit_threshold=0.5),
    "ouro_delayed": ExitConfig(mode="ouro_delayed", exit_threshold=0.6),
    "random_lookahead": ExitConfig(mode="random_lookahead", exit_threshold=0.5, seed=7),
    "trace": ExitConfig(mode="trace"),
}


def _params(mode: str) -> list[SamplingParams]:
    """Greedy and seeded-sampling requests; request 1 stays fixed-depth beside adaptive ones."""
    out = []
    for i in range(len(PROMPTS)):
        sampling = dict(temperature=0.9, top_k=20, top_p=0.9, seed=100 + i) if i % 2 else {}
        exit_cfg = FIXED if i == 1 else None
        trace = TRACES[i] if mode == "trace" else None
        out.append(SamplingParams(max_tokens=7, exit=exit_cfg, exit_trace=trace, **sampling))
    return out


class _BatchLog:
    def __init__(self, llm: LLM) -> None:
        self.batches: list[Batch] = []
        inner = llm.runner.execute

        def execute(batch: Batch):  # type: ignore[no-untyped-def]
            self.batches.append(batch)
            return inner(batch)

        llm.runner.execute = execute  # type: ignore[method-assign]

    def wavefront_steps(self) -> int:
        """Steps where one request holds several prompt items, at different depths."""
        n = 0
        for b in self.batches:
            depths: dict[str, list[int]] = {}
            for it in b.items:
                if it.kind is ItemKind.PROMPT:
                    depths.setdefault(it.request_id, []).append(it.depth)
            if any(len(ds) > 1 and len(set(ds)) == len(ds) for ds in depths.values()):
                n += 1
        return n

    def mixed_with_adaptive_decode(self) -> int:
        return sum(
            1 for b in self.batches if b.is_mixed
            and any(it.kind is ItemKind.DECODE and it.needs_signal for it in b.items)
        )


@pytest.mark.parametrize("mode", list(MODES))
def test_arms_and_serial_agree_on_tokens_and_exit_depths(mode: str) -> None:
    model = tiny_model(gate_std=0.6)
    exit_cfg = MODES[mode]
    params = _params(mode)
    results = {}
    logs = {}
    for arm in ARMS:
        llm = make_llm(model, arm, exit_cfg)
        logs[arm] = _BatchLog(llm)
        results[arm] = outputs_key(llm.generate(PROMPTS, params))
        assert llm.core.block_manager.num_used_blocks == 0
    expected = serial(model, PROMPTS, params, exit_cfg)
    for arm in ARMS:
        assert results[arm] == expected, f"{arm} differs from the serial run"
    depths = [d for _, ds in expected for d in ds[1:]]
    assert expected[1][1] == [4] * 7  # the fixed-depth request never exits early
    if mode == "fixed":
        assert set(depths) == {4}
    else:
        assert min(depths) < 4, "no early exit: the test would not exercise adaptive depth"
        assert any(b.is_mixed for b in logs["mixed"].batches)
    if mode in ("ouro", "ouro_delayed", "random_lookahead"):
        assert logs["mixed"].mixed_with_adaptive_decode() > 0
        assert logs["wavefront"].mixed_with_adaptive_decode() > 0
    assert logs["wavefront"].wavefront_steps() > 0
    assert all(log.wavefront_steps() == 0 for arm, log in logs.items() if arm != "wavefront")
    if mode == "trace":
        assert [ds for _, ds in expected] == [list(t) for t in TRACES]


def test_seeded_sampling_is_batch_invariant_and_seed_sensitive() -> None:
    model = tiny_model()
    params = [SamplingParams(max_tokens=8, temperature=1.0, seed=5) for _ in range(3)]
    prompts = [[1, 2, 3], [1, 2, 3], [4, 5, 6, 7]]
    batched = outputs_key(make_llm(model, "mixed").generate(prompts, params))
    assert batched[0] == batched[1]  # same prompt, same seed, different batch rows
    assert batched == serial(model, prompts, params)
    reseeded = [SamplingParams(max_tokens=8, temperature=1.0, seed=6)] * 3
    other = outputs_key(make_llm(model, "mixed").generate(prompts, reseeded))
    assert other[0][0] != batched[0][0]


VARIANTS = {
    "prompt_shortcut": ("mixed", dict(prompt_shortcut=True)),
    "incremental_a0": ("atomic", dict(incremental_allocation=True)),
    "incremental_a2": ("mixed", dict(incremental_allocation=True)),
    "derived_chunk": ("mixed", dict(chunk_policy="derive", max_num_batched_tokens=10)),
    "coda_batching": ("per_depth", dict(min_coda_batch_size=3)),
    "two_prefills_per_decode": ("atomic", dict(max_prefill_batches_before_decode=2)),
    "small_blocks": ("mixed", dict(block_size=1, num_blocks=600)),
    "incremental_a3": ("wavefront", dict(incremental_allocation=True)),
    "wide_wavefront": ("wavefront", dict(max_num_batched_tokens=40, prefill_chunk_size=4)),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_scheduler_and_cache_variants_match_serial(variant: str) -> None:
    arm, kw = VARIANTS[variant]
    model = tiny_model(gate_std=0.6)
    exit_cfg = MODES["trace"]
    params = _params("trace")
    llm = make_llm(model, arm, exit_cfg, **kw)
    log = _BatchLog(llm)
    got = outputs_key(llm.generate(PROMPTS, params))
    assert got == serial(model, PROMPTS, params, exit_cfg)
    assert llm.core.block_manager.num_used_blocks == 0
    if arm == "wavefront":
        assert log.wavefront_steps() > 0
    if variant == "prompt_shortcut":
        assert any(b.stage.value == "PREFILL" and b.num_core_calls > 1 for b in log.batches)
