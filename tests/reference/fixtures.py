"""Shared builders for the real-engine tests (tiny model, fp32, CPU)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch

from engine.core import ExitConfig, SamplingParams
from engine.core.batch import ItemKind, ScheduledItem
from engine.llm import LLM, RequestOutput
from engine.model import OuroForCausalLM, build_model

torch.set_num_threads(1)  # tiny tensors: threads only add overhead

ENGINE_KWARGS: dict[str, object] = dict(
    max_num_seqs=4, max_num_batched_tokens=16, prefill_chunk_size=8, block_size=4, num_blocks=256
)
ARMS = ("atomic", "per_depth", "mixed", "wavefront")


def tiny_model(seed: int = 0, gate_std: float = 0.0, gate_bias: float = 0.0) -> OuroForCausalLM:
    """The tiny preset; ``gate_std``/``gate_bias`` reshape the exit gate so lambda varies."""
    model = build_model("tiny", seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    gate = model.model.early_exit_gate
    with torch.no_grad():
        gate.weight.copy_(torch.randn(gate.weight.shape, generator=gen) * gate_std)
        gate.bias.fill_(gate_bias)
    return model


def make_llm(model: OuroForCausalLM, arm: str, exit: ExitConfig | None = None, **kw: object) -> LLM:
    return LLM(model, arm=arm, exit=exit, **{**ENGINE_KWARGS, **kw})


class HiddenRecorder:
    """hidden_hook that keeps each (request, position, depth) -> hidden row."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int, int], torch.Tensor] = {}
        self.depths_run: dict[str, dict[int, int]] = defaultdict(dict)

    def __call__(self, item: ScheduledItem, depth: int, rows: torch.Tensor) -> None:
        for i in range(item.num_tokens):
            key = (item.request_id, item.position + i, depth)
            assert key not in self.rows, f"{key} ran twice"
            self.rows[key] = rows[i].clone()
        if item.kind is ItemKind.DECODE:
            self.depths_run[item.request_id][item.position] = depth + 1


def outputs_key(outs: Sequence[RequestOutput]) -> list[tuple[list[int], list[int]]]:
    return [(o.output_token_ids, o.exit_depths) for o in outs]


def serial(model: OuroForCausalLM, prompts: Sequence[Sequence[int]],
           params: Sequence[SamplingParams], exit: ExitConfig | None = None,
           arm: str = "atomic") -> list[tuple[list[int], list[int]]]:
    """Each request alone on a fresh engine."""
    out = []
    for p, sp in zip(prompts, params, strict=True):
        (o,) = make_llm(model, arm, exit).generate([p], [sp])
        out.append((o.output_token_ids, o.exit_depths))
    return out
