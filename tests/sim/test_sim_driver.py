"""The SimPy driver: timing of a known request, arrivals before scheduling, idle waits,
triggered arrivals, determinism and the deadlock guard."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine.core import ExitConfig, SamplingParams, Stage
from engine.core.records import ArrivalSpec
from engine.core.results import StepRecord
from engine.core.shapes import TINY
from loopserve.stats.metrics import requests_frame, steps_frame, tokens_frame
from loopserve.workloads import build_source
from sim import make_cost_model, make_signal_fn, simulate
from sim.cost.base import CostModel
from tests.helpers import ListSource, make_config

ARMS = ("atomic", "per_depth", "mixed")


def spec(rid: str, prompt_tokens: int, max_tokens: int, at: float | None = 0.0,
         injected: bool = False) -> ArrivalSpec:
    return ArrivalSpec(rid, tuple(range(1, prompt_tokens + 1)),
                       SamplingParams(max_tokens=max_tokens, ignore_eos=True), at, injected)

def readback_runs(arm: str, exit_cfg: ExitConfig, cost: CostModel) -> tuple[list[StepRecord],
                                                                          list[StepRecord]]:
    """The steps of one small workload with ``readback_skip`` on and off; asserts both run
    the same batches (the knob changes what a step reads back, never what it schedules)."""
    timed = [spec("a", 16, 6), spec("b", 12, 5), spec("c", 20, 4, at=0.0005, injected=True)]
    runs = {}
    for skip in (True, False):
        cfg = make_config(arm, exit=exit_cfg, readback_skip=skip)
        fn = make_signal_fn(exit_cfg, TINY.num_depths, seed=0)
        runs[skip] = simulate(cfg, ListSource(list(timed)), cost, signal_fn=fn)
    on, off = runs[True].steps, runs[False].steps
    assert [(s.stage, s.num_decode_items, s.depths) for s in on] == [
        (s.stage, s.num_decode_items, s.depths) for s in off]
    return on, off



@pytest.mark.parametrize("arm", ARMS)
def test_one_request_takes_the_hand_counted_number_of_calls(arm: str) -> None:
    # prompt 16 = two chunks of 8; 3 output tokens with fixed depth 4:
    # prompt: 2 chunks x 4 depths = 8 calls, CODA 1, then 2 x (PRELUDE + 4 RECURRENT + CODA)
    cost = make_cost_model("constant", TINY, core_call_s=0.001)
    rec = simulate(make_config(arm), ListSource([spec("a", 16, 3)]), cost)
    assert rec.steps[-1].end_s == pytest.approx(0.001 * (8 + 1 + 2 * 6))
    assert [t.time_s for t in rec.tokens] == pytest.approx([0.009, 0.015, 0.021])
    (req,) = rec.requests
    assert (req.first_token_s, req.finish_s) == (rec.tokens[0].time_s, rec.tokens[-1].time_s)
    assert req.output_tokens == 3 and req.finish_reason == "length"


def _first_step_at(rec_steps: list, t: float) -> int:  # type: ignore[type-arg]
    return next(i for i, s in enumerate(rec_steps) if s.start_s == t)


@pytest.mark.parametrize("earlier_arrival", [False, True])
def test_arrival_at_a_step_boundary_is_submitted_before_scheduling(earlier_arrival: bool) -> None:
    # A0, 0.25 s per call: A's PREFILL [0, 1], CODA [1, 1.25], PRELUDE [1.25, 1.5],
    # decode [1.5, 1.75]. B arrives at exactly 1.75, so the step at 1.75 must prefill B
    # (without B it would be A's next decode). An arrival at 1.625 makes the engine's
    # timeout fire before the arrival process's at 1.75, the order SimPy alone gets wrong.
    cost = make_cost_model("constant", TINY, core_call_s=0.25)
    timed = [spec("A", 8, 4), spec("B", 8, 1, at=1.75)]
    if earlier_arrival:
        timed.append(spec("C", 8, 1, at=1.625))
    rec = simulate(make_config("atomic"), ListSource(timed), cost, record_batches=True)
    i = _first_step_at(rec.steps, 1.75)
    stage, items = rec.batches[i]
    assert stage == "PREFILL"
    assert "B" in {item[0] for item in items}
    assert rec.steps[i - 1].stage == "RECURRENT" and rec.steps[i - 1].start_s == 1.5


def test_engine_idles_until_the_next_arrival() -> None:
    cost = make_cost_model("constant", TINY, core_call_s=0.001)
    rec = simulate(make_config("mixed"), ListSource([spec("a", 8, 2), spec("b", 8, 2, at=5.0)]),
                   cost)
    starts = [s.start_s for s in rec.steps]
    assert max(s for s in starts if s < 5.0) < 0.02
    assert min(s for s in starts if s >= 5.0) == 5.0
    assert {r.request_id: r.arrival_s for r in rec.requests} == {"a": 0.0, "b": 5.0}


@pytest.mark.parametrize("arm", ARMS)
def test_triggered_arrival_arrives_at_its_token_time(arm: str) -> None:
    cost = make_cost_model("roofline", TINY)
    inj = spec("inj", 12, 2, at=None, injected=True)
    src = ListSource([spec("d0", 4, 20), spec("d1", 4, 20)], {("d0", 7): [inj]})
    rec = simulate(make_config(arm), src, cost)
    d0_tokens = [t for t in rec.tokens if t.request_id == "d0"]
    by_id = {r.request_id: r for r in rec.requests}
    assert by_id["inj"].arrival_s == d0_tokens[7].time_s
    assert by_id["inj"].injected and not by_id["d0"].injected
    assert by_id["inj"].first_token_s > d0_tokens[7].time_s
    assert rec.invalid_reasons == []


def _poisson_run(arm: str, seed: int):  # type: ignore[no-untyped-def]
    cfg = make_config(arm, max_num_seqs=4, max_num_batched_tokens=24, prefill_chunk_size=16,
                      exit=ExitConfig(mode="ouro", exit_threshold=0.6))
    wl = {"kind": "poisson", "num_requests": 40, "request_rate": 50.0,
          "prompt_tokens": {"dist": "uniform", "low": 4, "high": 40},
          "output_tokens": {"dist": "uniform", "low": 1, "high": 12}}
    src = build_source(wl, seed=seed, vocab_size=64)
    signals = make_signal_fn(cfg.exit, cfg.num_depths, seed=seed)
    return simulate(cfg, src, make_cost_model("roofline", TINY), signal_fn=signals, seed=seed,
                    record_batches=True)


@pytest.mark.parametrize("arm", ARMS)
def test_same_inputs_give_identical_records_and_csv_bytes(arm: str) -> None:
    a, b = _poisson_run(arm, 3), _poisson_run(arm, 3)
    assert (a.steps, a.tokens, a.requests, a.batches) == (b.steps, b.tokens, b.requests, b.batches)
    for frame in (steps_frame, requests_frame, tokens_frame):
        assert frame(a).to_csv(index=False).encode() == frame(b).to_csv(index=False).encode()
    c = _poisson_run(arm, 4)
    assert [t.token_id for t in c.tokens] != [t.token_id for t in a.tokens]


def test_adaptive_exits_are_the_same_in_every_arm() -> None:
    depths = {}
    for arm in ARMS:
        rec = _poisson_run(arm, 5)
        assert len(rec.requests) == 40
        depths[arm] = {(t.request_id, t.index): t.exit_depth for t in rec.tokens}
    assert depths["atomic"] == depths["per_depth"] == depths["mixed"]
    values = list(depths["atomic"].values())
    assert min(values) < 4 and max(values) == 4  # the λ stream really exits some tokens early


def test_a_request_that_never_fits_fails_before_it_runs() -> None:
    cfg = make_config("atomic", num_blocks=8)
    with pytest.raises(ValueError, match="KV blocks"):
        simulate(cfg, ListSource([spec("big", 64, 4)]), make_cost_model("roofline", TINY))


def test_stalled_core_raises_deadlock_instead_of_looping() -> None:
    # A core that schedules nothing is a bug, so it is made by patching EngineCore.schedule;
    # compiled callers ignore a patch, so this runs on the Python sources.
    code = (
        "import sys\n"
        "from engine.core.engine_core import EngineCore\n"
        "from sim import SimulationDeadlock, make_cost_model, simulate\n"
        "from engine.core.shapes import TINY\n"
        "from tests.helpers import ListSource, make_config\n"
        "from tests.sim.test_sim_driver import spec\n"
        "EngineCore.schedule = lambda self, now: None\n"
        "try:\n"
        "    simulate(make_config('mixed'), ListSource([spec('a', 8, 2)]),\n"
        "             make_cost_model('roofline', TINY))\n"
        "except SimulationDeadlock as e:\n"
        "    print('deadlock:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "LOOPSERVE_NATIVE": "0"}, check=True)
    assert out.stdout.startswith("deadlock:") and "schedules nothing" in out.stdout


def test_steps_tile_time_and_every_request_finishes() -> None:
    rec = _poisson_run("mixed", 0)
    for prev, cur in zip(rec.steps, rec.steps[1:], strict=False):
        assert cur.start_s >= prev.end_s
    assert all(s.end_s > s.start_s for s in rec.steps)
    assert sorted(r.request_id for r in rec.requests) == sorted(f"req-{i}" for i in range(40))
    assert sum(r.output_tokens for r in rec.requests) == len(rec.tokens)
    assert any(s.mixed for s in rec.steps) and rec.steps[0].stage == Stage.RECURRENT.value


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("mode", ["ouro", "ouro_delayed", "random_lookahead"])
def test_readback_skip_off_charges_a_readback_per_decode_loop(arm: str, mode: str) -> None:
    """RFC §4 at threshold 1.0 in simulation: with ``readback_skip`` off every step holding
    decode rows in the loop records one readback and costs the roofline's ``readback_s``
    more; with it on (the default) only CODA steps read back. Same batches either way."""
    exit_cfg = ExitConfig(mode=mode, exit_threshold=1.0)
    cost = make_cost_model("roofline", TINY, hardware="h200")
    on, off = readback_runs(arm, exit_cfg, cost)
    loops = [s.stage == "RECURRENT" and s.num_decode_items > 0 for s in off]
    assert sum(loops) > 0
    assert [s.num_readbacks for s in on] == [int(s.stage == "CODA") for s in on]
    assert [s.num_readbacks for s in off] == [
        int(s.stage == "CODA" or loop) for s, loop in zip(off, loops, strict=True)]
    readback_s = cost.hardware.readback_s
    assert readback_s > 0
    for a, b, loop in zip(on, off, loops, strict=True):
        assert (b.end_s - b.start_s) - (a.end_s - a.start_s) == pytest.approx(
            readback_s if loop else 0.0, abs=1e-12)
