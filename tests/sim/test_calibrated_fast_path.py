"""The calibrated model's per-step path gives the reference's doubles: ``feature_values``'
one pass against the call-by-call feature walk (written out below as it was defined), and
``CalibratedCost.split`` (``LinearFit`` on the features' list) against the profile's
``StageFit.predict`` on the features' dict (``execute_time``, ``gap_time``)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.batch import Batch, ItemKind
from engine.core.request import Stage
from sim.cost.after_idle import AfterIdleCost
from sim.cost.base import StepContext, item_context
from sim.cost.calibrated import CalibratedCost
from sim.cost.features import FEATURE_NAMES, batch_features
from tests.sim.test_step_pricing_fast_paths import batches

PROFILE = Path(__file__).resolve().parents[2] / "results" / "profiles" / "cpu-small.json"


def _reference_features(batch: Batch) -> dict[str, float]:
    f = dict.fromkeys(FEATURE_NAMES, 0.0)
    f["items"] = float(len(batch.items))
    f["finalize_copies"] = float(sum(len(op.to_depths) for op in batch.housekeeping.finalize))
    if batch.stage in (Stage.PRELUDE, Stage.CODA):
        f["rows"] = float(len(batch.items))
        return f
    f["core_calls"] = float(batch.num_core_calls)
    ctx_max = 0
    for call in batch.core_call_items():
        call_decode_rows = 0
        call_decode_ctx = 0
        for item, depth in call:
            n = item.num_tokens
            kv_tokens, ctx_sum, ctx_top = item_context(item)
            f["rows"] += n
            if item.kind is ItemKind.DECODE:
                f["decode_rows"] += n
                if item.needs_signal:
                    f["signal_rows"] += 1
                call_decode_rows += n
                call_decode_ctx = max(call_decode_ctx, ctx_top)
            else:
                f["prompt_tokens"] += n
                f["prompt_seqs"] += 1
                f["prompt_context"] += n * kv_tokens
                f["prompt_kv_tokens"] += kv_tokens
            f["context_sum"] += ctx_sum
            ctx_max = max(ctx_max, ctx_top)
            if item.fused_prelude and depth == item.depth:
                f["fused_prelude_rows"] += n
        f["decode_padded_context"] += call_decode_rows * call_decode_ctx
    f["context_max"] = float(ctx_max)
    return f


def _profiles() -> list[dict[str, object]]:
    checked_in = json.loads(PROFILE.read_text())
    # every optional term: a rows grid beside the context grid, a readback term
    extended = json.loads(PROFILE.read_text())
    extended["stages"]["decode"]["rows_grid"] = {
        "feature": "decode_rows", "points": [1.0, 2.0, 8.0], "values_s": [0.0, 3e-4, 5e-4]}
    extended["readback"] = {"readback_s": 2.5e-5}
    return [checked_in, extended]


MODELS = [CalibratedCost(doc) for doc in _profiles()]


@settings(max_examples=300, deadline=None)
@given(batch=batches())
def test_feature_values_are_the_call_by_call_features(batch: Batch) -> None:
    fast = batch_features(batch)
    ref = _reference_features(batch)
    assert list(fast) == list(ref) == list(FEATURE_NAMES)
    assert fast == ref  # the same doubles
    assert all(type(v) is float for v in fast.values())


@settings(max_examples=200, deadline=None)
@given(batch=batches(), prev=st.none() | batches(), idle_s=st.sampled_from([0.0, 1e-3, 0.3]),
       since=st.integers(0, 5))
def test_calibrated_split_is_the_stage_fits_prediction(batch: Batch, prev: Batch | None,
                                                      idle_s: float, since: int) -> None:
    for cost in MODELS:
        ctx = StepContext(batch, prev, idle_s, since)
        try:
            kind, fit = cost._fit(batch, prev)
        except ValueError:
            continue  # a stage the profile lacks (an empty recurrent batch)
        execute_s = cost._execute_s(fit, batch, _reference_features(batch))
        assert cost.split(ctx) == (kind, execute_s, cost.gap_time(batch))
        assert cost.step_time(ctx) == execute_s + cost.gap_time(batch)
        assert cost.execute_time(ctx) == execute_s
        wrapped = AfterIdleCost(cost, cost.profile.after_idle)  # type: ignore[arg-type]
        factor = cost.profile.after_idle.factor(idle_s, kind, since)  # type: ignore[union-attr]
        assert wrapped.split(ctx) == (kind, execute_s * factor if idle_s > 0.0 else execute_s,
                                      cost.gap_time(batch))
