"""Calibration fitting (pure numpy): coefficient recovery, model choice, grid terms, held-out
separation, profile round trip with the optional parts, and the profile resolver."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from engine.core.batch import Batch, ItemKind, ScheduledItem
from engine.core.request import Stage
from sim.cost.base import StepContext
from sim.cost.calibrated import CalibratedCost
from sim.cost.features import FEATURE_NAMES, batch_features
from sim.cost.fit import Sample, fit_stage, pooled_held_out
from sim.cost.profile import GridTerm, Profile, load_profile, save_profile
from sim.cost.resolve import find_profile, resolve_cost
from sim.cost.shape_grid import QUICK, GridSpec, fit_shapes, held_out_shapes
from tests.helpers import profile_doc, stage


def _features(**kv: float) -> dict[str, float]:
    f = dict.fromkeys(FEATURE_NAMES, 0.0)
    f.update(kv)
    return f


def _decode_samples(fn: object, n: int, seed: int, noise: float, held_out: bool = False,
                    ) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        rows = rng.randint(1, 16)
        ctx = rng.randint(16, 2048)
        f = _features(decode_rows=rows, decode_padded_context=rows * ctx,
                      context_sum=rows * ctx * 0.6, context_max=ctx, rows=rows, items=rows,
                      core_calls=1)
        t = fn(f) * (1.0 + rng.uniform(-noise, noise))  # type: ignore[operator]
        out.append(Sample("decode", f, t, held_out, f"r{rows} c{ctx}"))
    return out


def test_fit_recovers_known_coefficients_and_picks_the_true_features() -> None:
    a, b, c = 1.5e-3, 4e-5, 2e-8

    def truth(f: dict[str, float]) -> float:
        return a + b * f["decode_rows"] + c * f["decode_padded_context"]

    samples = _decode_samples(truth, 60, seed=1, noise=0.005)
    samples += _decode_samples(truth, 15, seed=2, noise=0.005, held_out=True)
    res = fit_stage("decode", samples)
    assert res is not None and res.fit.grid is None
    assert set(res.fit.features) == {"decode_rows", "decode_padded_context"}
    coef = dict(zip(res.fit.features, res.fit.coef, strict=True))
    assert res.fit.intercept_s == pytest.approx(a, rel=0.05)
    assert coef["decode_rows"] == pytest.approx(b, rel=0.1)
    assert coef["decode_padded_context"] == pytest.approx(c, rel=0.05)
    assert res.num_fit == 60 and res.num_held_out == 15
    assert res.held_out_mape is not None and res.held_out_mape < 0.01


def test_held_out_samples_never_influence_the_fit() -> None:
    def truth(f: dict[str, float]) -> float:
        return 1e-3 + 3e-8 * f["decode_padded_context"]

    base = _decode_samples(truth, 40, seed=3, noise=0.0)
    outlier = Sample("decode", _features(decode_rows=4, decode_padded_context=4000,
                                         context_max=1000), 1e-6, True, "outlier")
    clean = fit_stage("decode", base)
    dirty = fit_stage("decode", [*base, outlier])
    assert clean is not None and dirty is not None
    assert dirty.fit == clean.fit
    assert dirty.held_out_max_error is not None and dirty.held_out_max_error > 10
    mape, worst = pooled_held_out({"decode": dirty})
    assert worst == dirty.held_out_max_error and mape == dirty.held_out_mape


def test_a_cliff_is_captured_by_a_grid_term() -> None:
    """Cost per padded position triples past 8192 (a cache cliff): a linear model misses it
    by tens of percent; the grid term follows it."""
    def truth(f: dict[str, float]) -> float:
        x = f["decode_padded_context"]
        return 2e-3 + 1e-6 * x + 2e-6 * max(0.0, x - 8192)

    grid_rows = [1, 2, 4, 8, 16]
    grid_ctx = [64, 256, 1024, 2048]
    samples = [Sample("decode", _features(decode_rows=r, decode_padded_context=r * c,
                                          context_max=c), truth(_features(
                                              decode_padded_context=r * c)))
               for r in grid_rows for c in grid_ctx]
    samples += _decode_samples(truth, 12, seed=4, noise=0.0, held_out=True)
    res = fit_stage("decode", samples)
    assert res is not None and res.fit.grid is not None
    assert res.fit.grid.feature == "decode_padded_context"
    assert res.held_out_mape is not None and res.held_out_mape < 0.05


def test_a_jump_from_one_to_two_decode_rows_is_captured_by_a_rows_grid() -> None:
    """On a CPU one row runs matrix-vector kernels and two run matrix-matrix ones: +0.9 ms
    from 1 to 2 rows, then 0.1 ms a row, beside a context cliff. A linear row term splits the
    difference (10% off at 1 and 2 rows); the rows grid follows it, the context grid stays."""
    def truth(f: dict[str, float]) -> float:
        r, x = f["decode_rows"], f["decode_padded_context"]
        return (2.9e-3 + 0.9e-3 * min(r - 1, 1.0) + 1e-4 * max(0.0, r - 2) + 1e-6 * x
                + 2e-6 * max(0.0, x - 8192))

    samples = [Sample("decode", _features(decode_rows=r, decode_padded_context=r * c,
                                          context_max=c), truth(_features(
                                              decode_rows=r, decode_padded_context=r * c)))
               for r in (1, 2, 4, 8, 12, 16) for c in (64, 256, 1024, 2048)]
    held = [Sample("decode", f, truth(f), True) for r in (1, 2, 3)
            for f in [_features(decode_rows=r, decode_padded_context=r * 128, context_max=128)]]
    res = fit_stage("decode", [*samples, *held])
    assert res is not None and res.fit.rows_grid is not None
    assert res.fit.grid is not None and res.fit.grid.feature == "decode_padded_context"
    assert res.held_out_max_error is not None and res.held_out_max_error < 0.02
    # the same model through the profile file: the rows grid is priced
    for f in (h.features for h in held):
        assert res.fit.predict(f) == pytest.approx(truth(f), rel=0.02)


def test_small_prefill_chunks_costlier_per_token_are_captured_by_a_prompt_tokens_grid() -> None:
    """A prefill of 16 tokens a depth costs more per token than the big chunks' slope says
    (a CPU's small matrix products): a linear token term under-prices it; the grid in
    prompt_tokens follows it."""
    def truth(f: dict[str, float]) -> float:
        n = f["prompt_tokens"]
        return 8e-3 + 2.5e-4 * min(n, 256.0) + 1.2e-4 * max(0.0, n - 256) + 1e-8 * f[
            "prompt_context"]

    def feats(n: int, p: int) -> dict[str, float]:
        return _features(prompt_tokens=n, prompt_seqs=1, core_calls=4,
                         prompt_context=n * (n + p), prompt_kv_tokens=n + p)

    samples = [Sample("prefill", f, truth(f)) for n in (64, 256, 512, 1024, 2048)
               for p in (0, 256, 1024, 2048) for f in [feats(n, p)]]
    held = [Sample("prefill", f, truth(f), True) for f in (feats(64, 512), feats(128, 0))]
    res = fit_stage("prefill", [*samples, *held])
    assert res is not None and res.fit.grid is not None
    assert res.fit.grid.feature == "prompt_tokens"
    assert res.held_out_max_error is not None and res.held_out_max_error < 0.02


def test_negative_coefficients_are_never_chosen() -> None:
    rng = random.Random(5)
    samples = [Sample("prompt", _features(prompt_tokens=n, prompt_seqs=1,
                                          prompt_context=n * (n + p), prompt_kv_tokens=n + p),
                      (2e-3 + 5e-6 * n) * (1 + rng.uniform(-0.05, 0.05)))
               for n in (16, 64, 128, 256) for p in (0, 256, 1024, 2048)]
    res = fit_stage("prompt", samples)
    assert res is not None
    assert all(c >= 0 for c in res.fit.coef) and res.fit.intercept_s >= 0


def test_a_kind_without_fitting_samples_has_no_model() -> None:
    held = _decode_samples(lambda f: 1e-3, 5, seed=6, noise=0.0, held_out=True)
    assert fit_stage("decode", held) is None
    assert fit_stage("coda", held) is None


def test_a_single_fitting_sample_gives_its_own_time() -> None:
    (one,) = _decode_samples(lambda f: 2e-3, 1, seed=7, noise=0.0)
    res = fit_stage("decode", [one])
    assert res is not None and res.fit.features == [] and res.fit.grid is None
    assert res.fit.intercept_s == pytest.approx(one.seconds)


def test_grid_term_interpolates_and_extends_linearly() -> None:
    g = GridTerm(feature="rows", points=[0, 10, 20], values_s=[0.0, 1.0, 3.0])
    assert g.value(5) == pytest.approx(0.5)
    assert g.value(15) == pytest.approx(2.0)
    assert g.value(30) == pytest.approx(5.0)  # last slope continues
    with pytest.raises(ValueError, match="increasing"):
        GridTerm(feature="rows", points=[0, 10, 10], values_s=[0, 1, 2])
    with pytest.raises(ValueError, match="unknown feature"):
        GridTerm(feature="flux", points=[0, 1], values_s=[0, 1])


def _profile_dict() -> dict[str, object]:
    return profile_doc("small", "cpu", {
        "decode": stage(1e-3, {"feature": "decode_padded_context", "points": [0, 100, 200],
                               "values_s": [0, 1e-4, 4e-4]}, decode_rows=1e-5),
        "prelude": stage(5e-5),
    }, step_gap=stage(3e-5, items=2e-6), device="test cpu", torch_version="2.13.0",
        held_out_mape=0.03, held_out_mape_by_stage={"decode": 0.02}, num_threads=1)


def test_profile_round_trips_with_grid_and_step_gap(tmp_path: Path) -> None:
    prof = Profile.model_validate(_profile_dict())
    path = tmp_path / "cpu-small.json"
    save_profile(prof, path)
    again = load_profile(path)
    assert again == prof
    item = ScheduledItem("a", 0, ItemKind.DECODE, 149, 1)
    batch = Batch(0, Stage.RECURRENT, (item,))
    f = batch_features(batch)
    assert f["decode_padded_context"] == 150
    cost = CalibratedCost(again, hardware="cpu", model="small")
    execute = 1e-3 + 1e-5 + 2.5e-4  # grid: halfway between 1e-4 and 4e-4
    assert cost.execute_time(StepContext(batch)) == pytest.approx(execute)
    assert cost.gap_time(batch) == pytest.approx(3e-5 + 2e-6)
    assert cost.step_time(StepContext(batch)) == pytest.approx(execute + 3e-5 + 2e-6)
    assert cost.breakdown(batch)["total_s"] == cost.step_time(StepContext(batch))


def test_old_profiles_without_the_optional_parts_still_load(tmp_path: Path) -> None:
    data = _profile_dict()
    del data["step_gap"]
    data["stages"]["decode"].pop("grid")  # type: ignore[index]
    data["provenance"] = {k: v for k, v in data["provenance"].items()  # type: ignore[attr-defined]
                          if k in ("device", "torch_version", "dtype", "commit", "date")}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    cost = CalibratedCost(path)
    batch = Batch(0, Stage.RECURRENT, (ScheduledItem("a", 0, ItemKind.DECODE, 9, 1),))
    assert cost.step_time(StepContext(batch)) == pytest.approx(1e-3 + 1e-5)


def test_shape_grid_covers_every_kind_and_holds_out_off_grid_shapes() -> None:
    for spec in (GridSpec(), QUICK):
        fit = fit_shapes(spec)
        held = held_out_shapes(spec)
        assert {s.kind for s in fit} == {s.kind for s in held} == {
            "decode", "prompt", "mixed", "prefill", "prelude", "coda", "decode_after_prompt"}
        assert not any(s.held_out for s in fit) and all(s.held_out for s in held)
        mixed = [s for s in fit if s.kind == "mixed"]
        assert any(p.fused for s in mixed for p in s.prompts)
        assert any(not p.fused for s in mixed for p in s.prompts)
        assert {s.num_depths for s in fit if s.kind == "prefill"} >= {spec.num_depths}
    assert held_out_shapes(GridSpec(), seed=3) == held_out_shapes(GridSpec(), seed=3)


def test_resolver_finds_profiles_and_auto_falls_back_to_roofline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOPSERVE_PROFILES", raising=False)
    scenarios = tmp_path / "proj" / "scenarios"
    scenarios.mkdir(parents=True)
    assert find_profile("cpu", "no-such-model", scenarios) is None
    assert resolve_cost("auto", None, "cpu", "no-such-model", scenarios) == ("roofline", None)
    # the working directory is never searched
    decoy = tmp_path / "results" / "profiles" / "cpu-no-such-model.json"
    decoy.parent.mkdir(parents=True)
    decoy.write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert find_profile("cpu", "no-such-model", scenarios) is None
    # beside the scenario's parent (the repository layout), then $LOOPSERVE_PROFILES first
    path = tmp_path / "proj" / "results" / "profiles" / "cpu-no-such-model.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    assert find_profile("cpu", "no-such-model", scenarios) == path
    assert resolve_cost("auto", None, "cpu", "no-such-model", scenarios) == ("calibrated",
                                                                            str(path))
    monkeypatch.setenv("LOOPSERVE_PROFILES", str(decoy.parent))
    assert find_profile("cpu", "no-such-model", scenarios) == decoy
    assert resolve_cost("roofline", None, "cpu", "no-such-model") == ("roofline", None)


def test_a_decode_call_after_prompt_work_uses_the_after_prompt_stage() -> None:
    data = _profile_dict()
    data["stages"]["decode_after_prompt"] = {  # type: ignore[index]
        "features": ["decode_rows"], "coef": [1e-5], "intercept_s": 5e-3}
    cost = CalibratedCost(data)
    decode = Batch(1, Stage.RECURRENT, (ScheduledItem("a", 0, ItemKind.DECODE, 9, 1),))
    prompt = Batch(0, Stage.RECURRENT, (ScheduledItem("b", 0, ItemKind.PROMPT, 0, 8),))
    prefill = Batch(0, Stage.PREFILL, (ScheduledItem("b", 0, ItemKind.PROMPT, 0, 8,
                                                     num_depths=4),))
    mixed = Batch(0, Stage.RECURRENT, decode.items + prompt.items)
    warm = cost.execute_time(StepContext(decode))
    assert warm == cost.execute_time(StepContext(decode, decode)) < 5e-3
    for prev in (prompt, prefill, mixed):
        assert cost.execute_time(StepContext(decode, prev)) == pytest.approx(5e-3 + 1e-5)
        assert cost.step_time(StepContext(decode, prev)) == pytest.approx(5e-3 + 1e-5 + 3e-5 + 2e-6)
    # without the stage (older profiles) a decode call after prompt work is priced warm
    assert CalibratedCost(_profile_dict()).execute_time(StepContext(decode, prompt)) == warm


def test_the_simulator_prices_each_step_after_the_one_before_it() -> None:
    from engine.core import SamplingParams
    from engine.core.records import ArrivalSpec
    from sim import simulate
    from tests.helpers import make_config

    data = _profile_dict()
    stages = data["stages"]  # type: ignore[index]
    for kind in ("prompt", "mixed", "prefill", "coda"):
        stages[kind] = {"features": [], "coef": [], "intercept_s": 2e-3}
    stages["decode_after_prompt"] = {"features": [], "coef": [], "intercept_s": 7e-3}

    class Source:
        def initial(self) -> list[ArrivalSpec]:
            return [ArrivalSpec(f"r{i}", tuple(range(24)), SamplingParams(max_tokens=4), 0.0)
                    for i in range(3)]

        def on_token(self, event: object) -> list[ArrivalSpec]:
            return []

        def triggers_on_tokens(self) -> bool:
            return False

    cfg = make_config("per_depth", max_num_seqs=3, max_num_batched_tokens=16,
                      prefill_chunk_size=8)
    rec = simulate(cfg, Source(), CalibratedCost(data))
    decode_after = [(p, s) for p, s in zip(rec.steps, rec.steps[1:], strict=False)
                    if s.kind == "decode" and p.kind in ("prompt", "prefill", "mixed")]
    decode_warm = [s for p, s in zip(rec.steps, rec.steps[1:], strict=False)
                   if s.kind == "decode" and p.kind not in ("prompt", "prefill", "mixed")]
    assert decode_after and decode_warm
    assert all(s.end_s - s.start_s > 7e-3 for _, s in decode_after)  # + the step gap
    assert all(s.end_s - s.start_s < 5e-3 for s in decode_warm)


def test_in_situ_decode_after_prompt_work_is_scored_by_the_after_prompt_model() -> None:
    from loopserve.calibrate.host_gap import execute_samples

    decode = Batch(1, Stage.RECURRENT, (ScheduledItem("a", 0, ItemKind.DECODE, 9, 1),))
    prompt = Batch(0, Stage.RECURRENT, (ScheduledItem("b", 0, ItemKind.PROMPT, 0, 8),))
    samples = execute_samples([decode, prompt, decode, decode], [1e-3, 2e-3, 0.0, 1e-3], "run")
    assert [s.kind for s in samples] == ["decode", "prompt", "decode"]  # t <= 0 is dropped
    samples = execute_samples([prompt, decode, decode], [2e-3, 1e-3, 1e-3], "run")
    assert [s.kind for s in samples] == ["prompt", "decode_after_prompt", "decode"]
    assert all(s.held_out for s in samples)
