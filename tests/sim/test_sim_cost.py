"""Cost models: constant counts core calls, roofline physics, calibrated profile round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.core import Batch, ItemKind, ScheduledItem, Stage
from engine.core.batch import FinalizeOp, Housekeeping
from engine.core.shapes import MODEL_SHAPES, OURO_1_4B
from sim.cost import (
    CalibratedCost,
    ConstantCost,
    Profile,
    RooflineCost,
    batch_features,
    load_profile,
    make_cost_model,
    save_profile,
)
from sim.cost.base import StepContext
from tests.helpers import profile_doc, stage

D = 4


def decode(rid: str, position: int, depth: int = 0) -> ScheduledItem:
    return ScheduledItem(rid, 0, ItemKind.DECODE, position, 1, depth=depth)


def prompt(rid: str, start: int, count: int, depth: int = 0, num_depths: int = 1,
           fused: bool = False) -> ScheduledItem:
    return ScheduledItem(rid, 0, ItemKind.PROMPT, start, count, depth=depth,
                         num_depths=num_depths, fused_prelude=fused)


def recurrent(*items: ScheduledItem) -> Batch:
    return Batch(0, Stage.RECURRENT, tuple(items))


def coda(n: int) -> Batch:
    return Batch(0, Stage.CODA, tuple(decode(f"r{i}", 10) for i in range(n)))


def prelude(n: int) -> Batch:
    return Batch(0, Stage.PRELUDE, tuple(
        ScheduledItem(f"r{i}", 0, ItemKind.DECODE, 10, 1, num_depths=0) for i in range(n)))


# ---- constant ----------------------------------------------------------------------------
def test_constant_charges_core_calls_per_step() -> None:
    c = ConstantCost(0.002)
    a0_prefill = Batch(0, Stage.PREFILL, (prompt("a", 0, 8, num_depths=D, fused=True),
                                          prompt("b", 0, 8, num_depths=D, fused=True)))
    shortcut = Batch(0, Stage.PREFILL, (prompt("a", 0, 8, depth=1, num_depths=3),))
    a1_prompt = recurrent(prompt("a", 0, 8, depth=2))
    a2_mixed = recurrent(decode("d", 30, 1), decode("e", 30, 3), prompt("a", 0, 8, depth=0))
    assert c.step_time(StepContext(a0_prefill)) == pytest.approx(4 * 0.002)
    assert c.step_time(StepContext(shortcut)) == pytest.approx(3 * 0.002)
    assert c.step_time(StepContext(a1_prompt)) == pytest.approx(0.002)
    assert c.step_time(StepContext(a2_mixed)) == pytest.approx(0.002)
    assert c.step_time(StepContext(coda(3))) == pytest.approx(0.002)
    assert c.step_time(StepContext(prelude(3))) == pytest.approx(0.002)
    assert c.breakdown(a0_prefill)["total_s"] == c.step_time(StepContext(a0_prefill))
    assert c.breakdown(a0_prefill)["calls"] == 4  # the D depths of the atomic chunk


def test_constant_needs_positive_core_call_s() -> None:
    with pytest.raises(ValueError, match="core_call_s"):
        make_cost_model("constant", OURO_1_4B)
    with pytest.raises(ValueError, match="core_call_s"):
        ConstantCost(0.0)


def test_unknown_kind_and_hardware_rejected() -> None:
    with pytest.raises(ValueError, match="cost.kind"):
        make_cost_model("magic", OURO_1_4B)
    with pytest.raises(ValueError, match="hardware"):
        make_cost_model("roofline", OURO_1_4B, hardware="tpu")


# ---- roofline ----------------------------------------------------------------------------
def test_one_decode_row_on_h200_sits_on_the_weight_floor() -> None:
    cost = make_cost_model("roofline", OURO_1_4B, hardware="h200")
    floor = 1_233_321_984 * 2 / 4.3e12  # the stack's bf16 bytes at 4.3 TB/s
    t = cost.step_time(StepContext(recurrent(decode("a", 0))))
    terms = cost.breakdown(recurrent(decode("a", 0)))
    overhead = terms["host_s"] + terms["step_overhead_s"]
    assert 30e-6 <= overhead <= 120e-6
    assert t == pytest.approx(floor + overhead, rel=2e-3)
    assert terms["weights_s"] == pytest.approx(floor)
    assert terms["total_s"] == t


def test_roofline_monotone_in_rows_and_context() -> None:
    cost = make_cost_model("roofline", OURO_1_4B)
    by_rows = [cost.step_time(StepContext(recurrent(*(decode(f"r{i}", 512) for i in range(n)))))
               for n in (1, 2, 8, 32, 128, 512)]
    assert all(a < b for a, b in zip(by_rows, by_rows[1:], strict=False))
    by_ctx = [cost.step_time(StepContext(recurrent(decode("a", p))))
              for p in (0, 1024, 8192, 65536)]
    assert all(a < b for a, b in zip(by_ctx, by_ctx[1:], strict=False))
    by_prefix = [cost.step_time(StepContext(recurrent(prompt("a", s, 128))))
                 for s in (0, 512, 4096, 32768)]
    assert all(a < b for a, b in zip(by_prefix, by_prefix[1:], strict=False))
    by_chunk = [cost.step_time(StepContext(recurrent(prompt("a", 0, n))))
                for n in (16, 256, 2048, 8192)]
    assert all(a < b for a, b in zip(by_chunk, by_chunk[1:], strict=False))


def test_mixing_prompt_rows_into_decode_is_cheaper_than_two_calls() -> None:
    cost = make_cost_model("roofline", OURO_1_4B)
    decodes = [decode(f"d{i}", 600, i % D) for i in range(8)]
    chunk = prompt("p", 0, 128, depth=1)
    mixed = cost.step_time(StepContext(recurrent(*decodes, chunk)))
    separate = (cost.step_time(StepContext(recurrent(*decodes)))
                + cost.step_time(StepContext(recurrent(chunk))))
    assert mixed < 0.7 * separate


def test_atomic_prefill_costs_d_calls_and_embeds_once() -> None:
    cost = make_cost_model("roofline", OURO_1_4B)
    a0 = Batch(0, Stage.PREFILL, (prompt("a", 0, 128, num_depths=D, fused=True),))
    per_depth = [recurrent(prompt("a", 0, 128, depth=d, fused=d == 0)) for d in range(D)]
    assert cost.step_time(StepContext(a0)) == pytest.approx(
        sum(cost.step_time(StepContext(b)) for b in per_depth)
        - (D - 1) * cost.breakdown(a0)["step_overhead_s"]
    )
    terms = cost.breakdown(a0)
    assert terms["host_s"] == pytest.approx(D * 40e-6)  # the h200 preset's per-call host cost
    assert terms["embed_s"] == pytest.approx(2 * 128 * 2048 * 2 / 4.3e12)


def test_coda_prelude_and_finalize_terms() -> None:
    cost = make_cost_model("roofline", OURO_1_4B)
    assert isinstance(cost, RooflineCost)
    lm_head = 2048 * 49152 * 2 / 4.3e12
    assert cost.breakdown(coda(1))["lm_head_s"] == pytest.approx(lm_head, rel=1e-2)
    assert cost.step_time(StepContext(coda(8))) > cost.step_time(StepContext(coda(1)))
    assert cost.step_time(StepContext(prelude(1))) < cost.step_time(StepContext(coda(1)))
    hk = Housekeeping(finalize=(FinalizeOp("a", 0, 5, 0, (1, 2, 3)),))
    plain = recurrent(decode("a", 6))
    with_copy = Batch(0, Stage.RECURRENT, plain.items, hk)
    kv_position_bytes = 2 * 24 * 16 * 128 * 2  # K and V, 24 layers, 16 KV heads of 128, bf16
    copy_s = 2 * 3 * kv_position_bytes / 4.3e12  # three positions read and written
    assert (cost.step_time(StepContext(with_copy)) - cost.step_time(StepContext(plain))
            == pytest.approx(copy_s))


def test_cpu_preset_defaults_to_fp32() -> None:
    small = MODEL_SHAPES["small"]
    cpu = make_cost_model("roofline", small, hardware="cpu")
    cpu_bf16 = make_cost_model("roofline", small, hardware="cpu", dtype_bytes=2)
    b = recurrent(decode("a", 10))
    assert cpu.breakdown(b)["weights_s"] == pytest.approx(2 * cpu_bf16.breakdown(b)["weights_s"])
    h200 = make_cost_model("roofline", small, hardware="h200")
    assert cpu.step_time(StepContext(b)) > h200.step_time(StepContext(b))


# ---- calibrated --------------------------------------------------------------------------
def _profile(model: str = "ouro-1.4b", hardware: str = "h200") -> dict[str, object]:
    return profile_doc(model, hardware, {
        "decode": stage(6e-4, rows=2e-6, context_sum=1e-9),
        "mixed": stage(6.5e-4, rows=2e-6, prompt_tokens=1e-6, fused_prelude_rows=5e-8),
        "coda": stage(1e-4, rows=1e-6),
    }, device="NVIDIA H200", torch_version="2.13.0", dtype="bfloat16", commit="abc123",
        held_out_mape=0.05)


def test_calibrated_predicts_the_linear_model_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "h200-ouro-1.4b.json"
    save_profile(Profile.model_validate(_profile()), path)
    cost = make_cost_model("calibrated", OURO_1_4B, hardware="h200", profile=path)
    b = recurrent(decode("a", 99), decode("b", 9))
    assert cost.step_time(StepContext(b)) == pytest.approx(6e-4 + 2e-6 * 2 + 1e-9 * (100 + 10))
    mixed = recurrent(decode("a", 99), prompt("p", 8, 4, fused=True))
    f = batch_features(mixed)
    assert (f["rows"], f["prompt_tokens"], f["fused_prelude_rows"]) == (5, 4, 4)
    assert f["context_sum"] == 100 + (9 + 10 + 11 + 12) and f["context_max"] == 100
    assert cost.step_time(StepContext(mixed)) == pytest.approx(
        6.5e-4 + 2e-6 * 5 + 1e-6 * 4 + 5e-8 * 4)
    again = load_profile(path)
    assert again == Profile.model_validate(_profile())
    assert CalibratedCost(again).step_time(StepContext(mixed)) == cost.step_time(StepContext(mixed))
    terms = cost.breakdown(mixed)
    assert terms["total_s"] == cost.step_time(StepContext(mixed))
    assert sum(v for k, v in terms.items() if k != "total_s") == pytest.approx(terms["total_s"])


def test_calibrated_missing_stage_is_a_clear_error() -> None:
    cost = CalibratedCost(_profile())
    with pytest.raises(ValueError, match="no 'prefill' stage"):
        cost.step_time(StepContext(Batch(0, Stage.PREFILL, (prompt("a", 0, 8, num_depths=D),))))


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "not valid JSON"),
        (json.dumps(_profile())[:-40], "not valid JSON"),
        ("[1, 2]", "format"),
        (json.dumps({**_profile(), "format": "loopserve-profile/0"}), "format"),
        (json.dumps({**_profile(), "stages": {}}), "stages"),
        (json.dumps({**_profile(), "stages": {"decode": {"features": ["rows"], "coef": [1, 2],
                                                         "intercept_s": 0}}}), "coefficients"),
        (json.dumps({**_profile(), "stages": {"decode": {"features": ["flux"], "coef": [1],
                                                         "intercept_s": 0}}}), "unknown features"),
        (json.dumps({**_profile(), "extra": 1}), "extra"),
    ],
)
def test_corrupt_profiles_raise_one_line_value_errors(tmp_path: Path, text: str,
                                                      match: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as err:
        make_cost_model("calibrated", OURO_1_4B, profile=path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_missing_profile_file_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read"):
        make_cost_model("calibrated", OURO_1_4B, profile=tmp_path / "nope.json")


def test_mismatched_profile_names_both(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_profile(model="ouro-2.6b")))
    with pytest.raises(ValueError, match="ouro-2.6b.*ouro-1.4b"):
        make_cost_model("calibrated", OURO_1_4B, profile=path)
    path.write_text(json.dumps(_profile(hardware="cpu")))
    with pytest.raises(ValueError, match="'cpu'.*'h200'"):
        make_cost_model("calibrated", OURO_1_4B, hardware="h200", profile=path)
    # an explicit model name wins over the preset lookup
    path.write_text(json.dumps(_profile(model="my-ckpt")))
    assert make_cost_model("calibrated", OURO_1_4B, profile=path, model_name="my-ckpt")
