"""The LLM facade (generate, stream) and the wall-clock driver ``run_realtime``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine.core import SamplingParams
from engine.core.records import ArrivalSpec
from engine.llm import LLM, build_runner, make_engine_config
from engine.realtime import HostTiming, run_realtime
from tests.helpers import ListSource
from tests.reference.fixtures import ENGINE_KWARGS, make_llm, outputs_key, tiny_model

PARAMS = SamplingParams(max_tokens=4, temperature=0.7, seed=1)


def _spec(rid: str, prompt: list[int], at: float | None, **kw: object) -> ArrivalSpec:
    return ArrivalSpec(rid, tuple(prompt), kw.pop("params", PARAMS), at, **kw)  # type: ignore[arg-type]


def test_generate_and_stream_agree() -> None:
    model = tiny_model()
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [3, 3]]
    outs = make_llm(model, "mixed").generate(prompts, PARAMS)
    events = list(make_llm(model, "mixed").stream(prompts, PARAMS))
    for o in outs:
        mine = [e for e in events if e.request_id == o.request_id]
        assert [e.index for e in mine] == list(range(4))
        assert [e.token_id for e in mine] == o.output_token_ids
        assert [e.exit_depth for e in mine] == o.exit_depths
        assert [e.finished for e in mine] == [False, False, False, True]
        assert o.finish_reason == "length" and o.prompt_token_ids in prompts


def test_llm_validates_options() -> None:
    with pytest.raises(ValueError, match="bogus: unknown engine option"):
        LLM("tiny", bogus=1)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        LLM("tiny", arm="mixed", max_num_seqs=8, max_num_batched_tokens=128,
            prefill_chunk_size=128)
    with pytest.raises(ValueError, match="2 sampling params for 1 prompts"):
        LLM("tiny").generate([[1]], [PARAMS, PARAMS])


def test_realtime_replays_arrivals_on_wall_clock_and_matches_generate() -> None:
    model = tiny_model()
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 9], [4, 5, 6], [7, 8, 9, 10, 11]]
    times = [0.0, 0.05, 0.12]
    source = ListSource([_spec(str(i), p, t) for i, (p, t) in enumerate(zip(prompts, times,
                                                                            strict=True))])
    llm = make_llm(model, "mixed")
    timings: list[HostTiming] = []
    records = run_realtime(llm.cfg, source, llm.runner, host_timings=timings,
                           record_batches=True)
    by_id = {r.request_id: r for r in records.requests}
    for i, t in enumerate(times):
        r = by_id[str(i)]
        assert r.arrival_s == t and r.first_token_s is not None and r.first_token_s > t
        assert r.finish_reason == "length"
        first = next(k for k, (_, items) in enumerate(records.batches)
                     if any(it[0] == str(i) for it in items))
        assert records.steps[first].start_s >= t  # its first step waits until it is due
    assert records.wall_s >= 0.12
    starts = [s.start_s for s in records.steps]
    assert starts == sorted(starts) and all(s.end_s >= s.start_s for s in records.steps)
    tokens = {(e.request_id, e.index): (e.token_id, e.exit_depth) for e in records.tokens}
    expected = make_llm(model, "atomic").generate(prompts, PARAMS)
    for i, (toks, depths) in enumerate(outputs_key(expected)):
        assert [tokens[str(i), k] for k in range(4)] == list(zip(toks, depths, strict=True))
    assert len(timings) == len(records.steps)
    assert all(t.schedule_s > 0 and t.prepare_s >= 0 for t in timings)
    assert any(t.prepare_s > 0 for t in timings if t.core_calls)
    assert llm.core.block_manager.num_used_blocks == 0  # the LLM's own core: untouched by the run
    assert llm.runner.decode_states.num_in_use == 0 and llm.runner.prompt_states.num_in_use == 0


def test_triggered_arrival_comes_at_the_token_time_and_validity_is_recorded() -> None:
    model = tiny_model()
    cfg = make_engine_config(model, arm="mixed", **{**ENGINE_KWARGS, "max_num_seqs": 2})
    long = SamplingParams(max_tokens=8)
    inject = _spec("inject", [9] * 6, None, injected=True)
    late = _spec("late", [8] * 6, None, injected=True)
    source = ListSource(
        [_spec("a", [1, 2, 3], 0.0, params=long), _spec("b", [4, 5], 0.0, params=long)],
        {("a", 2): [inject], ("a", 7): [late]},
    )
    runner = build_runner(model, cfg)
    records = run_realtime(cfg, source, runner, record_batches=True)
    trigger = next(e for e in records.tokens if (e.request_id, e.index) == ("a", 2))
    by_id = {r.request_id: r for r in records.requests}
    assert by_id["inject"].arrival_s == trigger.time_s and by_id["inject"].injected
    # Both slots were busy when "inject" came; "late" came as "a" finished (slot freed).
    assert len(records.invalid_reasons) == 1
    assert records.invalid_reasons[0].startswith("injected request inject found no free slot")
    assert by_id["late"].finish_reason == "length" and len(records.batches) == len(records.steps)


def test_batch_failure_is_routed_to_core_fail_and_the_run_continues() -> None:
    model = tiny_model()
    cfg = make_engine_config(model, arm="per_depth", **ENGINE_KWARGS)
    runner = build_runner(model, cfg)
    runner.fail_on_step = 9  # request 2's prompt at depth 1 (its prompt state is live)
    source = ListSource([_spec(str(i), [i + 1] * (3 + 5 * i), 0.0) for i in range(3)])
    records = run_realtime(cfg, source, runner, record_batches=True)
    assert records.batches[9] == ("RECURRENT", (("2", "PROMPT", 0, 8, 1, 1),))
    reasons = {r.request_id: r.finish_reason for r in records.requests}
    assert reasons == {"0": "length", "1": "length", "2": "error"}
    assert [s.step for s in records.steps] == list(range(len(records.steps)))
    assert runner.decode_states.num_in_use == 0 and runner.prompt_states.num_in_use == 0
    # The same runner serves a fresh run (new core) with identical results.
    runner.fail_on_step = None
    again = [run_realtime(cfg, ListSource([_spec("x", [5, 6, 7], 0.0)]), runner)
             for _ in range(2)]
    assert [(e.token_id, e.exit_depth) for e in again[0].tokens] == [
        (e.token_id, e.exit_depth) for e in again[1].tokens
    ]


def test_objects_alive_before_a_run_are_frozen_during_it_and_released_after() -> None:
    """No full collection over a model and earlier runs' records inside a timed step: they
    sit in the permanent generation for the run (gc.freeze), and are handed back after."""
    import gc

    model = tiny_model()
    cfg = make_engine_config(model, arm="mixed", **ENGINE_KWARGS)
    runner = build_runner(model, cfg)
    frozen: list[int] = []
    execute = runner.execute

    def spying(batch):  # type: ignore[no-untyped-def]
        frozen.append(gc.get_freeze_count())
        return execute(batch)

    runner.execute = spying  # type: ignore[method-assign]
    gc.unfreeze()  # a clean start, whatever an earlier test left frozen
    before = gc.get_freeze_count()
    records = run_realtime(cfg, ListSource([_spec("a", [1, 2, 3], 0.0)]), runner)
    assert records.steps and len(frozen) == len(records.steps)
    assert min(frozen) > before + 1000  # at least the model and this test's objects
    assert gc.get_freeze_count() == before


def test_a_run_that_raises_still_unfreezes_and_a_callers_freeze_is_kept() -> None:
    import gc

    model = tiny_model()
    cfg = make_engine_config(model, arm="mixed", **ENGINE_KWARGS)
    runner = build_runner(model, cfg)

    class Raising(ListSource):
        def on_token(self, event):  # type: ignore[no-untyped-def]
            raise RuntimeError("source broke")

        def triggers_on_tokens(self) -> bool:
            return True

    gc.unfreeze()  # whatever an earlier test left frozen: this case needs a clean start
    with pytest.raises(RuntimeError, match="source broke"):
        run_realtime(cfg, Raising([_spec("a", [1, 2, 3], 0.0)]), runner)
    assert gc.get_freeze_count() == 0
    gc.freeze()  # a server that froze its start-up objects
    try:
        assert gc.get_freeze_count() > 0
        run_realtime(cfg, ListSource([_spec("a", [1, 2, 3], 0.0)]), runner)
        # Still frozen (an unfreeze empties the permanent generation). Not ">= before": frozen
        # objects still die by refcount, as the first run's core does when bind drops it.
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_stalled_llm_step_raises_the_drivers_stall_message() -> None:
    # As in test_sim_driver: the stall is made by patching EngineCore.schedule, which compiled
    # code ignores, so this runs on the Python sources.
    code = (
        "from engine.core.engine_core import EngineCore\n"
        "from engine.llm import LLM\n"
        "EngineCore.schedule = lambda self, now: None\n"
        "llm = LLM('tiny', max_num_seqs=2, max_num_batched_tokens=16, prefill_chunk_size=8,\n"
        "          num_blocks=64, block_size=4)\n"
        "llm.add_request([1, 2, 3])\n"
        "try:\n"
        "    llm.step()\n"
        "except RuntimeError as e:\n"
        "    print('stalled:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "LOOPSERVE_NATIVE": "0"}, check=True)
    assert out.stdout.startswith("stalled: at t=") and (
        "1 waiting and 0 running requests but schedules nothing" in out.stdout)
