"""The first step after the engine sat idle (``sim.cost.after_idle``): the profile term, the
calibrated cost, the simulator charging it only after a wait, and the fidelity comparison
pricing measured steps the same way."""

from __future__ import annotations

import math

import pytest

from engine.core import SamplingParams
from engine.core.records import ArrivalSpec
from engine.core.results import step_kind
from engine.core.shapes import TINY
from loopserve.fidelity.world import WorldRun
from loopserve.stats.metrics import summarize
from sim import simulate
from sim.cost.after_idle import AfterIdle
from sim.cost.calibrated import CalibratedCost
from sim.cost.profile import load_profile
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


def test_the_cost_scales_execute_time_after_idle_and_leaves_the_host_gap() -> None:
    cost, plain = CalibratedCost(_profile()), CalibratedCost(_profile(None))
    batch = _first_batch(cost)  # any batch will do: the simulator's own first one
    warm = cost.execute_time(batch)
    assert warm == plain.execute_time(batch, None, 0.5)
    assert cost.execute_time(batch, None, 0.1) == pytest.approx(1.2 * warm)  # a prefill
    assert cost.step_time(batch, None, 0.1) == pytest.approx(1.2 * warm + 5e-5)


def _spec(rid: str, at: float) -> ArrivalSpec:
    return ArrivalSpec(rid, tuple(range(1, 9)), SamplingParams(max_tokens=2, ignore_eos=True), at,
                       False)


class _Recording:
    def __init__(self, cost: CalibratedCost) -> None:
        self.cost, self.calls = cost, []  # type: ignore[var-annotated]

    def step_time(self, batch, prev=None, idle_s=0.0, since_idle=0):  # type: ignore[no-untyped-def]
        self.calls.append((batch, idle_s, since_idle))
        return self.cost.step_time(batch, prev, idle_s, since_idle)

    def breakdown(self, batch):  # type: ignore[no-untyped-def]
        return self.cost.breakdown(batch)


def _first_batch(cost: CalibratedCost):  # type: ignore[no-untyped-def]
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
    rec = _Recording(CalibratedCost(_profile()))
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
        AFTER_2S[arm] * cost.execute_time(batch, rec.calls[k - 1][0]) + 5e-5)
    # without the term the same run is the same but for that one step's length (no `later`)
    plain = _two(arm, CalibratedCost(_profile(None)))
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
    rec = _Recording(CalibratedCost(_profile(curve)))
    steps = _two("per_depth", rec)
    k = next(i for i, (_, idle, since) in enumerate(rec.calls) if idle > 0 and since == 0)
    for n, share in ((1, 0.5), (2, 0.25), (3, 0.0)):
        batch, prev = rec.calls[k + n][0], rec.calls[k + n - 1][0]
        warm = rec.cost.execute_time(batch, prev)
        kind_extra = {"prompt": 0.5, "decode": 0.1}.get(step_kind(batch), 0.3)
        assert steps.end_s[k + n] - steps.start_s[k + n] == pytest.approx(
            (1 + share * kind_extra) * warm + 5e-5), n


def test_fidelity_prices_a_measured_step_with_the_wait_before_it() -> None:
    cost = CalibratedCost(_profile({**CURVE, "later": [0.5]}))
    rec = _Recording(cost)
    sim = simulate(make_config("atomic"), ListSource([_spec("a", 0.0), _spec("b", 2.0)]), rec)
    batches = [c[0] for c in rec.calls]
    run = WorldRun(None, sim, batches, summarize(sim, TINY.num_depths))  # type: ignore[arg-type]
    predicted = run.predict(cost)
    k = next(i for i, (_, idle, since) in enumerate(rec.calls) if idle > 0 and since == 0)
    idle = rec.calls[k][1]
    assert predicted[k] == pytest.approx(cost.execute_time(batches[k], batches[k - 1], idle))
    assert predicted[k] > cost.execute_time(batches[k], batches[k - 1])
    # back to back after it, whatever the host gap between them: the later share, then none
    assert predicted[k + 1] == pytest.approx(cost.execute_time(batches[k + 1], batches[k],
                                                               idle, 1))
    assert predicted[k + 1] > cost.execute_time(batches[k + 1], batches[k])
    assert predicted[k + 2] == cost.execute_time(batches[k + 2], batches[k + 1])
    assert predicted[:k] == [cost.execute_time(b, batches[i - 1] if i else None)
                             for i, b in enumerate(batches[:k])]
