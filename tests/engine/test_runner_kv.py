"""Per-depth KV planes: prompt KV agrees across arms; finalize copies exited decode tokens only."""

from __future__ import annotations

import pytest
import torch

from engine.core import ExitConfig, Housekeeping, RequestStatus, SamplingParams, Stage
from engine.core.batch import FinalizeOp
from engine.llm import LLM
from tests.reference.fixtures import ARMS, make_llm, tiny_model

PROMPTS = [list(range(1, 12)), [4, 4, 2], [(7 * i) % 64 for i in range(19)]]
TRACES = [(4, 1, 2, 4, 3, 1), (4, 2, 2, 1, 4, 4), (4, 3, 1, 1, 2, 4)]
D = 4


def _prompt_kv(llm: LLM, request_id: str, prompt_len: int) -> torch.Tensor:
    """[depth, layer, k/v, position, kv_heads, head_dim] of one request's prompt."""
    key = (request_id, llm.core.requests[request_id].generation)
    cache = llm.runner.kv_cache
    out = []
    for d in range(D):
        table = llm.core.block_manager.block_table(key, d)
        per_layer = []
        for layer in range(cache.num_layers):
            kv = [torch.stack(pair) for pair in zip(
                *(cache.read(layer, table, p) for p in range(prompt_len)), strict=True)]
            per_layer.append(torch.stack(kv))
        out.append(torch.stack(per_layer))
    return torch.stack(out)


def _snapshot_prompts(arm: str) -> dict[str, torch.Tensor]:
    llm = make_llm(tiny_model(), arm)
    ids = [llm.add_request(p, SamplingParams(max_tokens=4)) for p in PROMPTS]
    snaps: dict[str, torch.Tensor] = {}
    while llm.core.has_work():
        llm.step()
        for rid, prompt in zip(ids, PROMPTS, strict=True):
            req = llm.core.requests.get(rid)
            if rid not in snaps and req is not None and (
                req.status is RequestStatus.RUNNING and req.stage is not Stage.PREFILL
            ):
                snaps[rid] = _prompt_kv(llm, rid, len(prompt))
    assert len(snaps) == len(PROMPTS)
    return snaps


def test_per_depth_prompt_kv_of_a1_and_a2_agrees_with_a0() -> None:
    ref = _snapshot_prompts("atomic")
    for arm in ("per_depth", "mixed"):
        got = _snapshot_prompts(arm)
        for rid in ref:
            torch.testing.assert_close(got[rid], ref[rid], rtol=1e-4, atol=1e-4)
    # Planes really differ per depth (a shared plane would make this test vacuous).
    assert (ref["0"][0] - ref["0"][1]).abs().max() > 1e-3


class _FinalizeCheck:
    """Wraps ``runner.release``: records ops and checks each copy landed on every layer."""

    def __init__(self, llm: LLM) -> None:
        self.ops: list[FinalizeOp] = []
        self.num_verified = 0
        runner, inner = llm.runner, llm.runner.release

        def release(hk: Housekeeping) -> None:
            inner(hk)
            self.ops.extend(hk.finalize)
            cache, kv = runner.kv_cache, llm.core.block_manager
            for op in hk.finalize:
                key = (op.request_id, op.generation)
                if not kv.holds(key):
                    continue  # finished right after exiting: nothing left to read it
                src = kv.block_table(key, op.from_depth)
                for d in op.to_depths:
                    dst = kv.block_table(key, d)
                    for layer in range(cache.num_layers):
                        for a, b in zip(cache.read(layer, src, op.position),
                                        cache.read(layer, dst, op.position), strict=True):
                            assert torch.equal(a, b)
                self.num_verified += 1

        runner.release = release  # type: ignore[method-assign]


@pytest.mark.parametrize("arm", ARMS)
def test_exited_decode_tokens_are_finalized_and_prompt_positions_never(arm: str) -> None:
    llm = make_llm(tiny_model(), arm, ExitConfig(mode="trace"))
    check = _FinalizeCheck(llm)
    params = [SamplingParams(max_tokens=6, exit_trace=t) for t in TRACES]
    outs = llm.generate(PROMPTS, params)
    expected = set()
    for o, prompt in zip(outs, PROMPTS, strict=True):
        for k, e in enumerate(o.exit_depths[1:], start=1):
            if e < D:
                expected.add((o.request_id, len(prompt) - 1 + k, e - 1, tuple(range(e, D))))
    got = [(op.request_id, op.position, op.from_depth, op.to_depths) for op in check.ops]
    assert sorted(got) == sorted(expected)
    assert check.num_verified >= len(expected) - len(PROMPTS)  # all but each last token
    for op in check.ops:
        assert op.position >= len(PROMPTS[int(op.request_id)])
