"""StepLoop: what follows a step, once for the SimPy driver, the real-time driver and
LLM.step: apply, feed triggered arrivals, record, collect finished requests."""

from __future__ import annotations

from engine.core import EngineCore, SamplingParams
from engine.core.records import ArrivalSpec
from engine.core.run_loop import StepLoop, stall_message
from engine.core.seeded_executor import SeededExecutor
from tests.helpers import ListSource, make_config

ONE = SamplingParams(max_tokens=1)


def _run(loop: StepLoop, ex: SeededExecutor, max_steps: int = 200) -> None:
    core, now = loop.core, 0.0
    for _ in range(max_steps):
        if loop.feeder is not None:
            loop.feeder.submit_due(now)
        if not core.has_work():
            return
        batch = core.schedule(now)
        assert batch is not None
        loop.after_step(batch, ex.execute(batch), now, now + 1.0)
        now += 1.0
    raise AssertionError("did not drain")


def test_with_a_source_steps_tokens_and_finished_requests_are_recorded() -> None:
    core = EngineCore(make_config("mixed"))
    injected = ArrivalSpec("b", (1, 2), ONE, None, injected=True)
    source = ListSource([ArrivalSpec("a", (1, 2, 3), SamplingParams(max_tokens=2), 0.0)],
                        {("a", 0): [injected]})
    loop = StepLoop(core, source)
    _run(loop, SeededExecutor())
    assert loop.recorder is not None
    rec = loop.recorder.records
    assert {r.request_id: r.injected for r in rec.requests} == {"a": False, "b": True}
    first_a = next(t for t in rec.tokens if t.request_id == "a")
    b = next(r for r in rec.requests if r.request_id == "b")
    assert b.arrival_s == first_a.time_s  # the triggered arrival comes at its token's time
    assert [s.step for s in rec.steps] == list(range(len(rec.steps)))
    assert loop.take_finished() == []  # recorded, not kept


def test_without_a_source_nothing_is_recorded_and_finished_requests_are_kept() -> None:
    core = EngineCore(make_config("atomic"))
    loop = StepLoop(core)
    core.add_request("a", [1, 2], ONE, 0.0)
    core.add_request("gone", [1, 2], ONE, 0.0)
    core.abort("gone")  # finished between steps: collected too
    _run(loop, SeededExecutor())
    assert loop.recorder is None and loop.feeder is None
    assert [(r.request_id, r.finish_reason) for r in loop.take_finished()] == [
        ("gone", "abort"), ("a", "length")]
    assert loop.take_finished() == []


def test_a_failed_batch_is_recorded_and_its_requests_finish_with_error() -> None:
    core = EngineCore(make_config("atomic"))
    loop = StepLoop(core, ListSource([ArrivalSpec("a", (1, 2), ONE, 0.0)]))
    assert loop.feeder is not None and loop.recorder is not None
    loop.feeder.submit_due(0.0)
    batch = core.schedule(0.0)
    assert batch is not None
    core.fail(batch, "boom")
    assert loop.after_step(batch, None, 0.0, 1.0) == []
    rec = loop.recorder.records
    assert len(rec.steps) == 1 and [r.finish_reason for r in rec.requests] == ["error"]


def test_the_stall_message_names_the_time_and_the_queues() -> None:
    core = EngineCore(make_config("atomic"))
    core.add_request("a", [1, 2], ONE, 0.0)
    assert stall_message(core, 1.5) == (
        "at t=1.500000s the core holds 1 waiting and 0 running requests but schedules "
        "nothing, and no arrival is pending")


def test_without_a_source_record_keeps_records_and_finished_requests() -> None:
    core = EngineCore(make_config("atomic"))
    loop = StepLoop(core, record=True)
    core.add_request("a", [1, 2], ONE, 0.0)
    core.add_request("gone", [1, 2], ONE, 0.0)
    core.abort("gone")
    assert [r.request_id for r in loop.take_finished()] == ["gone"]  # recorded here
    _run(loop, SeededExecutor())
    assert loop.recorder is not None and loop.feeder is None
    rec = loop.recorder.records
    assert [(r.request_id, r.finish_reason) for r in rec.requests] == [
        ("gone", "abort"), ("a", "length")]
    assert len(rec.steps) > 0 and [t.request_id for t in rec.tokens] == ["a"]
    assert [r.request_id for r in loop.take_finished()] == ["a"]
    assert len(rec.requests) == 2  # each finished request recorded once


class _CountingSource(ListSource):
    """Counts ``on_token`` calls; says it triggers on tokens as told."""

    def __init__(self, timed: list[ArrivalSpec], triggers: bool) -> None:
        super().__init__(timed)
        self.triggers_told = triggers
        self.num_calls = 0

    def on_token(self, event):  # type: ignore[no-untyped-def]
        self.num_calls += 1
        return super().on_token(event)

    def triggers_on_tokens(self) -> bool:
        return self.triggers_told


def test_a_source_that_triggers_nothing_is_not_asked_per_token() -> None:
    runs = {}
    for triggers in (False, True):
        source = _CountingSource(
            [ArrivalSpec("a", (1, 2, 3), SamplingParams(max_tokens=3), 0.0)], triggers)
        loop = StepLoop(EngineCore(make_config("mixed")), source)
        _run(loop, SeededExecutor())
        assert loop.recorder is not None
        runs[triggers] = (source.num_calls, list(loop.recorder.records.tokens))
    assert runs[False][0] == 0 and runs[True][0] == 3  # one call per token when it may trigger
    assert runs[False][1] == runs[True][1]
