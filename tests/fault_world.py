"""Two worlds for the fault-injection suite: the core with the fake executor, and the LLM
facade's core with the CPU runner on the tiny model. Each gives the same four operations,
so one driver injects faults into both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engine.core import Batch, EngineCore, SamplingParams, Stage, StepResult
from engine.core.request import Request
from engine.core.seeded_executor import SeededExecutor
from engine.llm import LLM
from tests.helpers import check_request_kv

Execute = Callable[[Batch, bool], StepResult]  # (batch, raise after housekeeping?)


@dataclass
class World:
    core: EngineCore
    execute: Execute
    drain: Callable[[], None]
    pools_in_use: Callable[[], dict[str, int]]


def fake_world(core: EngineCore) -> World:
    ex = SeededExecutor()

    def execute(batch: Batch, fail_after: bool) -> StepResult:
        result = ex.execute(batch)
        if fail_after:
            raise RuntimeError("injected after housekeeping")
        return result

    def drain() -> None:
        ex.execute(Batch(-1, Stage.PRELUDE, (), core.take_housekeeping()))

    return World(core, execute, drain, lambda: {"executor prompt states": len(ex.live_handles)})


def runner_world(llm: LLM) -> World:
    runner = llm.runner

    def execute(batch: Batch, fail_after: bool) -> StepResult:
        runner.fail_on_step = batch.step if fail_after else None  # raises after release()
        try:
            return runner.execute(batch)
        finally:
            runner.fail_on_step = None

    def pools() -> dict[str, int]:
        return {"runner prompt states": runner.prompt_states.num_in_use,
                "runner decode states": runner.decode_states.num_in_use}

    return World(llm.core, execute, llm.drain, pools)


@dataclass
class Outcome:
    finished: list[Request] = field(default_factory=list)
    failed: set[tuple[str, int]] = field(default_factory=set)  # (id, generation) errored by fail
    aborted: set[tuple[str, int]] = field(default_factory=set)
    num_failed_batches: int = 0


def run_with_faults(
    world: World, faults: dict[int, tuple[str, int]], max_steps: int = 3000
) -> Outcome:
    """Drive ``world.core`` to empty; at call k ``faults[k]`` = (action, n) is one of
    raise_before / raise_after (the execute fails), abort_scheduled (abort the batch's item
    n % len between schedule and execute), abort (any unfinished request), reuse (abort one
    and add a new request under its id)."""
    core, out = world.core, Outcome()
    now = 0.0
    for k in range(max_steps):
        if not core.has_work():
            break
        action, n = faults.get(k, ("", 0))
        if action in ("abort", "reuse") and core.requests:
            req = sorted(core.requests.values(), key=lambda r: r.request_id)[n % len(core.requests)]
            out.aborted.add((req.request_id, req.generation))
            core.abort(req.request_id)
            if action == "reuse":
                core.add_request(req.request_id, [(n + i) % 60 + 1 for i in range(3 + n % 9)],
                                 SamplingParams(max_tokens=1 + n % 3, ignore_eos=True), now)
            continue
        batch = core.schedule(now)
        assert batch is not None, "the core holds work but schedules nothing"
        if action == "abort_scheduled" and batch.items:
            item = batch.items[n % len(batch.items)]
            if core.abort(item.request_id):
                out.aborted.add(item.key)
        try:
            if action == "raise_before":
                raise RuntimeError("injected before housekeeping")
            result: StepResult | None = world.execute(batch, action == "raise_after")
        except RuntimeError:
            keys = {it.key for it in batch.items}
            failed = core.fail(batch)
            out.failed |= {key for key in keys if key[0] in failed}
            out.num_failed_batches += 1
            result = None
        now += 1.0
        if result is not None:
            core.apply(batch, result, now)
        core.block_manager.check_integrity()
        check_request_kv(core)
        out.finished += core.pop_finished()
    else:
        raise AssertionError(f"did not drain within {max_steps} steps")
    out.finished += core.pop_finished()
    return out


def assert_whole(world: World) -> None:
    """Every KV block, prompt-state handle and executor slot is back."""
    world.drain()
    core = world.core
    bm = core.block_manager
    bm.check_integrity()
    in_use = {"kv blocks": bm.num_used_blocks, "reserved kv blocks": bm.num_reserved_blocks,
              "core prompt-state handles": core.prompt_states.num_in_use,
              "requests": len(core.requests), **world.pools_in_use()}
    assert all(v == 0 for v in in_use.values()), in_use


def assert_only_failed_errored(out: Outcome) -> None:
    for req in out.finished:
        key = (req.request_id, req.generation)
        if key in out.failed:
            assert req.finish_reason == "error", key
        elif key in out.aborted:
            assert req.finish_reason == "abort", (key, req.finish_reason)
        else:
            assert req.finish_reason in ("length", "stop"), (key, req.finish_reason, req.error)
