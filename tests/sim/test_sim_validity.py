"""Run validity (RFC §6): injected prompts need a free slot and KV capacity on arrival, and a
mixed-arm run must form at least one mixed core call."""

from __future__ import annotations

import pytest

from engine.core.shapes import TINY
from loopserve.workloads import build_source
from sim import NO_MIXED_CALL, check, make_cost_model, simulate
from tests.helpers import make_config

ARMS = ("atomic", "per_depth", "mixed", "wavefront")


def _interference(population: int, inject_at: int = 3, prompt_tokens: int = 24):  # type: ignore[no-untyped-def]
    return build_source(
        {"kind": "interference", "decode_population": population, "decode_prompt_tokens": 4,
         "decode_output_tokens": 12,
         "inject": [{"at_decode_tokens": inject_at, "prompt_tokens": prompt_tokens,
                     "output_tokens": 2}]},
        seed=0, vocab_size=64,
    )


@pytest.mark.parametrize("arm", ARMS)
def test_injection_with_a_free_slot_and_capacity_is_valid(arm: str) -> None:
    rec = simulate(make_config(arm, max_num_seqs=4), _interference(3),
                   make_cost_model("roofline", TINY))
    assert rec.invalid_reasons == []
    assert check(rec, arm) == []
    by_id = {r.request_id: r for r in rec.requests}
    d0 = [t for t in rec.tokens if t.request_id == "decode-0"]
    assert by_id["inject-0"].injected and by_id["inject-0"].arrival_s == d0[3].time_s


@pytest.mark.parametrize("arm", ARMS)
def test_injection_without_a_free_slot_is_invalid(arm: str) -> None:
    rec = simulate(make_config(arm, max_num_seqs=4), _interference(4),
                   make_cost_model("roofline", TINY))
    reasons = check(rec, arm)
    assert "inject-0 found no free slot" in reasons[0] and "max_num_seqs 4" in reasons[0]
    # the prompt only starts once the decoders are gone, so A2 never mixes either
    assert reasons[1:] == ([NO_MIXED_CALL] if arm in ("mixed", "wavefront") else [])
    assert len(rec.requests) == 5  # the run still completes; the report says why it is invalid


@pytest.mark.parametrize("arm", ARMS)
def test_injection_without_kv_capacity_is_invalid(arm: str) -> None:
    # 3 decoders of 4 + 12 - 1 = 15 positions hold 4 blocks x 4 planes each (block 4): 48 of
    # 60 blocks; the injected 24 + 2 - 1 = 25 positions need 7 x 4 = 28.
    rec = simulate(make_config(arm, max_num_seqs=4, num_blocks=60), _interference(3),
                   make_cost_model("roofline", TINY))
    reasons = check(rec, arm)
    assert "inject-0 found no KV capacity" in reasons[0]
    assert "needs 28 blocks, 12 free" in reasons[0]
    assert reasons[1:] == ([NO_MIXED_CALL] if arm in ("mixed", "wavefront") else [])


def test_mixed_arm_without_mixed_call_is_invalid_other_arms_are_not() -> None:
    lone = build_source({"kind": "poisson", "num_requests": 1, "request_rate": 1.0,
                         "prompt_tokens": 20, "output_tokens": 3}, seed=0, vocab_size=64)
    for arm in ARMS:
        rec = simulate(make_config(arm), lone, make_cost_model("roofline", TINY))
        assert rec.num_mixed_core_calls == 0
        assert check(rec, arm) == ([NO_MIXED_CALL] if arm in ("mixed", "wavefront") else [])
        assert rec.invalid_reasons == []  # check() reports, it does not mutate the records
    assert check(rec, "A2") == [NO_MIXED_CALL]  # arm aliases resolve
    mixed = simulate(make_config("mixed", max_num_seqs=4), _interference(3),
                     make_cost_model("roofline", TINY))
    assert mixed.num_mixed_core_calls > 0 and check(mixed, "A2") == []
