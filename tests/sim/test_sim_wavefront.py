"""The wavefront arm in the simulator: a lone long prompt beside a small decode population,
its core calls to first token against a hand count, and its TTFT against the mixed arm's
where steps are bound by reading the weights."""

from __future__ import annotations

import pytest

from engine.core import EngineConfig, ExitConfig, SamplingParams
from engine.core.config import CacheConfig, SchedulerConfig
from engine.core.records import ArrivalSpec, RunRecords
from engine.core.shapes import OURO_1_4B, TINY
from sim import make_cost_model, simulate
from tests.helpers import ListSource

PROMPT_TOKENS = 2048
NUM_DECODES = 4


def lone_prompt_run(arm: str, chunk: int, budget: int, kind: str = "roofline",
                    ) -> tuple[RunRecords, float, int]:
    """Four decode requests (fixed exit, all depths) and, once the first has 4 tokens, one
    prompt of 2,048 tokens: the run, the prompt's TTFT and the RECURRENT steps (core calls)
    from its arrival to its first token."""
    shape = OURO_1_4B if kind == "roofline" else TINY
    cfg = EngineConfig(
        shape,
        SchedulerConfig(arm=arm, max_num_seqs=8, max_num_batched_tokens=budget,
                        prefill_chunk_size=chunk),
        CacheConfig(num_blocks=4096, block_size=16),
        ExitConfig(),
    )

    def spec(rid: str, n: int, out: int, at: float | None) -> ArrivalSpec:
        return ArrivalSpec(rid, tuple(range(1, n + 1)),
                           SamplingParams(max_tokens=out, ignore_eos=True), at, at is None)

    decodes = [spec(f"d{i}", 16, 200, 0.0) for i in range(NUM_DECODES)]
    src = ListSource(decodes, {("d0", 4): [spec("p", PROMPT_TOKENS, 2, None)]})
    cost = (make_cost_model("roofline", shape, hardware="h200") if kind == "roofline"
            else make_cost_model("constant", shape, core_call_s=0.001))
    rec = simulate(cfg, src, cost)
    p = next(r for r in rec.requests if r.request_id == "p")
    assert p.first_token_s is not None
    calls = sum(1 for s in rec.steps if s.stage == "RECURRENT"
                and p.arrival_s <= s.start_s and s.end_s <= p.first_token_s)
    return rec, p.first_token_s - p.arrival_s, calls


@pytest.mark.parametrize("kind", ["roofline", "constant"])
def test_lone_prompt_core_calls_match_the_hand_count(kind: str) -> None:
    """Hand count, 64-token chunks, budget 512, D = 4, four decode rows per core call.

    The prompt is C = 2048 / 64 = 32 chunks. Every RECURRENT step after its arrival carries
    prompt work (decode rows first: 4 rows, leaving 508 tokens, room for 7 chunks).

    - mixed: one prompt item at a time, one depth per step: C x D = 128 core calls.
    - wavefront: chunk k runs depth 0 in call k (it is ready once chunk k-1 has written
      depth 0) and depth d in call k + d (chunk k-1 wrote depth d in call k - 1 + d); at most
      D = 4 chunks are in flight, 4 x 64 + 4 = 260 rows, within the budget. The last chunk
      (k = 31) runs depth 3 in call 31 + 3 = 34, so C + D - 1 = 35 core calls.

    The first token then comes from the next CODA step (no core call).
    """
    _, _, mixed = lone_prompt_run("mixed", 64, 512, kind)
    rec, _, wave = lone_prompt_run("wavefront", 64, 512, kind)
    assert (mixed, wave) == (32 * 4, 32 + 4 - 1)
    steps = [s for s in rec.steps if s.stage == "RECURRENT"]
    assert max(s.num_prompt_items for s in steps) == 4  # the wavefront: four chunks at once
    # the steps table records it: 1, 2, 3, then 4 chunks of the one prompt, and back down
    # (the decode requests' own short prompts ran in the first steps)
    per_request = [s.max_prompt_items_per_request for s in steps if s.num_prompt_items]
    assert per_request[-36:] == [1] + [1, 2, 3] + [4] * 29 + [3, 2, 1]
    mixed_steps = lone_prompt_run("mixed", 64, 512, kind)[0].steps
    assert {s.max_prompt_items_per_request for s in mixed_steps if s.num_prompt_items} == {1}


def test_lone_prompt_ttft_on_the_h200_roofline() -> None:
    """Small chunks under a several-chunk budget: each step's time is set by reading the
    weights, so running four chunks at once costs little more than one."""
    _, mixed, _ = lone_prompt_run("mixed", 64, 512)
    _, wave, _ = lone_prompt_run("wavefront", 64, 512)
    assert wave <= 0.6 * mixed
