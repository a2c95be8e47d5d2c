"""The first step after the engine sat idle (``sim.cost.after_idle``): the profile term, the
effect composed onto a base cost model, the simulator charging it only after a wait, and the
fidelity comparison pricing measured steps the same way."""

from __future__ import annotations

import math

import pytest

from engine.core import SamplingParams
from engine.core.records import ArrivalSpec
from engine.core.results import step_kind
from engine.core.shapes import TINY
from loopserve.fidelity.world import WorldRun
from loopserve.stats.metrics import summarize
from sim import make_cost_model, simulate
from sim.cost.after_idle import AfterIdle, AfterIdleCost
from sim.cost.base import CostModel, StepContext
from sim.cost.calibrated import CalibratedCost
from sim.cost.profile import load_profile
from sim.cost.resolve import compose
from tests.helpers import ListSource, make_config, profile_doc, stage

# prefill is what the atomic arm runs first after a wait, prompt the other arms
CURVE = {"idle_s": [0.01, 0.1, 1.0],
         "extra": {"prefill": [0.0, 0.2, 0.3], "prompt": [0.0, 0.4, 0.5],
                   "decode": [0.1, 0.1, 0.1]}}
AFTER_2S = {"atomic": 1.3, "per_depth": 1.5, "mixed": 1.5}


def _profile(after_idle: dict[str, object] | None = CURVE) -> dict[str, object]:
    stages = {k: stage(1e-3, rows=1e-5) for k in ("decode", "prompt", "mixed", "prelude", "coda")}
    stages["prefill"] = stage(4e-3, prompt_tokens=1e-5)
    doc = profile_doc("tiny", "cpu", stages, step_gap=stage(5e-5))
    if after_idle is not None:
        doc["after_idle"] = after_idle
    return doc


def _cost(after_idle: dict[str, object] | None = CURVE) -> CostModel:
    """The calibrated model of ``_profile(after_idle)`` as a run resolves it."""
    return make_cost_model("calibrated", TINY, hardware="cpu", profile=_profile(after_idle))


def test_the_factor_interpolates_in_log_idle_time_and_holds_past_the_last_point() -> None:
    a = AfterIdle.model_validate(CURVE)
    assert a.factor(0.0, "prefill") == 1.0
    assert a.factor(0.005, "prefill") == 1.0  # half-way to the first point, whose extra is 0
    assert a.factor(0.1, "prefill") == pytest.approx(1.2)
    assert a.factor(math.sqrt(0.1), "prefill") == pytest.approx(1.25)  # log mid-point
    assert a.factor(30.0, "prefill") == pytest.approx(1.3)
    assert a.factor(0.1, "prompt") == pytest.approx(1.4)
    assert a.factor(0.1, "coda") == pytest.approx(1.2)  # not measured: the kinds' median
    first = AfterIdle(idle_s=[0.02], extra={"prompt": [0.4]})
    assert first.factor(0.01, "prompt") == pytest.approx(1.2)
    assert first.factor(5.0, "prompt") == pytest.approx(1.4)


@pytest.mark.parametrize(("bad", "why"), [
    ({"idle_s": [0.1, 0.05], "extra": {"prompt": [0.1, 0.2]}}, "strictly increasing"),
    ({"idle_s": [0.1], "extra": {"prompt": [0.1, 0.2]}}, "as many"),
    ({"idle_s": [0.1], "extra": {"prompt": [-0.1]}}, ">= 0"),
    ({"idle_s": [0.1], "extra": {"warp": [0.1]}}, "unknown step kind"),
])
def test_a_bad_curve_is_a_one_line_profile_error(bad: dict[str, object], why: str) -> None:
    with pytest.raises(ValueError, match=why) as err:
        load_profile(_profile(bad))
    assert "after_idle" in str(err.value) and "\n" not in str(err.value).strip()


def test_the_effect_is_composed_only_onto_a_profile_that_carries_it() -> None:
    cost, plain = _cost(), _cost(None)
    assert isinstance(cost, AfterIdleCost) and isinstance(cost.base, CalibratedCost)
    assert isinstance(plain, CalibratedCost)  # nothing to compose: the base itself
    base = CalibratedCost(_profile())
    composed = compose(base, base.profile)
    assert isinstance(composed, AfterIdleCost) and composed.base is base
    assert composed.after_idle == base.profile.after_idle


def test_the_effect_scales_execute_time_after_idle_and_leaves_the_host_gap() -> None:
    cost, plain = _cost(), _cost(None)
    assert isinstance(cost, AfterIdleCost) and isinstance(plain, CalibratedCost)
    batch = _first_batch(cost)  # any batch will do: the simulator's own first one
    warm = cost.execute_time(StepContext(batch))
    assert warm == plain.execute_time(StepContext(batch, None, 0.5))  # the base reads no idle
    assert cost.execute_time(StepContext(batch, None, 0.1)) == pytest.approx(1.2 * warm)
    assert cost.step_time(StepContext(batch, None, 0.1)) == pytest.approx(1.2 * warm + 5e-5)
    assert cost.gap_time(batch) == plain.gap_time(batch) == pytest.approx(5e-5)
    assert cost.step_time(StepContext(batch)) == plain.step_time(StepContext(batch))
    assert cost.breakdown(batch) == plain.breakdown(batch)


def test_the_effect_composes_onto_a_base_without_a_host_gap() -> None:
    roofline = make_cost_model("roofline", TINY, hardware="cpu")
    cost = AfterIdleCost(roofline, AfterIdle.model_validate(CURVE))
    batch = _first_batch(cost)  # an atomic prefill
    ctx = StepContext(batch, None, 0.1)
    assert cost.step_time(ctx) == pytest.approx(1.2 * roofline.step_time(ctx))
    assert cost.step_time(StepContext(batch)) == roofline.step_time(StepContext(batch))


def _spec(rid: str, at: float) -> ArrivalSpec:
    return ArrivalSpec(rid, tuple(range(1, 9)), SamplingParams(max_tokens=2, ignore_eos=True), at,
                       False)


class _Recording:
    def __init__(self, cost: CostModel) -> None:
        self.cost, self.calls = cost, []  # type: ignore[var-annotated]

    def step_time(self, ctx: StepContext) -> float:
        self.calls.append((ctx.batch, ctx.idle_s, ctx.since_idle))
        return self.cost.step_time(ctx)

    def breakdown(self, batch):  # type: ignore[no-untyped-def]
        return self.cost.breakdown(batch)


def _first_batch(cost: CostModel):  # type: ignore[no-untyped-def]
    rec = _Recording(cost)
    simulate(make_config("atomic"), ListSource([_spec("a", 0.0)]), rec)
    return rec.calls[0][0]


def _two(arm: str, cost: object):  # type: ignore[no-untyped-def]
    # b arrives 2 s after a started, long after a finished: its first step follows a wait;
    # every other step runs back to back.
    return simulate(make_config(arm), ListSource([_spec("a", 0.0), _spec("b", 2.0)]),
                    cost).steps  # type: ignore[arg-type]


@pytest.mark.parametrize("arm", ["atomic", "per_depth", "mixed"])
def test_the_simulator_charges_the_step_after_a_wait(arm: str) -> None:
    rec = _Recording(_cost())
    steps = _two(arm, rec)
    waited = [k for k, (_, idle, since) in enumerate(rec.calls) if idle > 0 and since == 0]
    assert len(waited) == 1
    k = waited[0]
    _, idle, _ = rec.calls[k]
    assert steps.start_s[k] == 2.0 and idle == pytest.approx(2.0 - steps.end_s[k - 1])
    assert [c[1:] for c in rec.calls[k:]] == [(idle, n) for n in range(len(rec.calls) - k)]
    assert all(c[1] == 0.0 for c in rec.calls[:k])
    batch, cost = rec.calls[k][0], rec.cost
    assert steps.end_s[k] - steps.start_s[k] == pytest.approx(
        AFTER_2S[arm] * cost.execute_time(StepContext(batch, rec.calls[k - 1][0])) + 5e-5)
    # without the term the same run is the same but for that one step's length (no `later`)
    plain = _two(arm, _cost(None))
    assert plain.start_s[:k + 1] == steps.start_s[:k + 1]
    assert plain.end_s[k] < steps.end_s[k]
    assert [b - a for a, b in zip(plain.start_s[k + 1:], plain.end_s[k + 1:], strict=True)] == \
        pytest.approx([b - a for a, b in zip(steps.start_s[k + 1:], steps.end_s[k + 1:],
                                             strict=True)])


def test_later_steps_after_a_wait_pay_their_share_of_the_first_steps_extra() -> None:
    curve = {**CURVE, "later": [0.5, 0.25]}
    a = AfterIdle.model_validate(curve)
    assert [a.factor(2.0, "prompt", n) for n in range(4)] == pytest.approx(
        [1.5, 1.25, 1.125, 1.0])
    rec = _Recording(_cost(curve))
    steps = _two("per_depth", rec)
    k = next(i for i, (_, idle, since) in enumerate(rec.calls) if idle > 0 and since == 0)
    for n, share in ((1, 0.5), (2, 0.25), (3, 0.0)):
        batch, prev = rec.calls[k + n][0], rec.calls[k + n - 1][0]
        warm = rec.cost.execute_time(StepContext(batch, prev))
        kind_extra = {"prompt": 0.5, "decode": 0.1}.get(step_kind(batch), 0.3)
        assert steps.end_s[k + n] - steps.start_s[k + n] == pytest.approx(
            (1 + share * kind_extra) * warm + 5e-5), n


def test_fidelity_prices_a_measured_step_with_the_wait_before_it() -> None:
    cost = _cost({**CURVE, "later": [0.5]})
    assert isinstance(cost, AfterIdleCost)
    rec = _Recording(cost)
    sim = simulate(make_config("atomic"), ListSource([_spec("a", 0.0), _spec("b", 2.0)]), rec)
    batches = [c[0] for c in rec.calls]
    run = WorldRun(None, sim, batches, summarize(sim, TINY.num_depths))  # type: ignore[arg-type]
    predicted = run.predict(cost)
    k = next(i for i, (_, idle, since) in enumerate(rec.calls) if idle > 0 and since == 0)
    idle = rec.calls[k][1]

    def execute_s(i: int, idle_s: float = 0.0, since: int = 0) -> float:
        return cost.execute_time(StepContext(batches[i], batches[i - 1] if i else None, idle_s,
                                             since))

    assert predicted[k] == pytest.approx(execute_s(k, idle))
    assert predicted[k] > execute_s(k)
    # back to back after it, whatever the host gap between them: the later share, then none
    assert predicted[k + 1] == pytest.approx(execute_s(k + 1, idle, 1))
    assert predicted[k + 1] > execute_s(k + 1)
    assert predicted[k + 2] == execute_s(k + 2)
    assert predicted[:k] == [execute_s(i) for i in range(k)]
