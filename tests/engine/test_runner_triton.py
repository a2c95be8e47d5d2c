"""The CPU runner on the triton backend (Triton's interpreter) gives the torch backend's tokens
and exit depths on the tiny model, in every arm, mixed core calls included."""

from __future__ import annotations

from engine.core import ExitConfig, SamplingParams
from engine.core.batch import Batch
from tests.reference.fixtures import ARMS, make_llm, outputs_key, tiny_model

PROMPTS = [[3, 1, 4], list(range(10, 31)), [9, 9, 8, 2, 6, 1]]
PARAMS = [
    SamplingParams(max_tokens=5),
    SamplingParams(max_tokens=5, temperature=0.9, top_k=20, seed=3),
    SamplingParams(max_tokens=5, exit=ExitConfig(mode="fixed")),
]


def test_triton_and_torch_agree_in_every_arm() -> None:
    model = tiny_model(gate_std=0.6)
    exit_cfg = ExitConfig(mode="ouro", exit_threshold=0.5)
    for arm in ARMS:
        runs = {}
        for backend in ("torch", "triton"):
            llm = make_llm(model, arm, exit_cfg, attention_backend=backend)
            assert llm.runner.backend.name == backend
            batches: list[Batch] = []
            inner = llm.runner.execute

            def execute(batch: Batch, inner=inner, batches=batches):  # type: ignore[no-untyped-def]
                batches.append(batch)
                return inner(batch)

            llm.runner.execute = execute  # type: ignore[method-assign]
            runs[backend] = outputs_key(llm.generate(PROMPTS, PARAMS))
            if arm == "mixed":  # the kernel saw decode and prompt rows in one call
                assert any(b.is_mixed for b in batches)
        assert runs["triton"] == runs["torch"], arm
        depths = {d for _, ds in runs["torch"] for d in ds[1:]}
        assert len(depths) > 1, "exits should vary so exit depths are compared"
