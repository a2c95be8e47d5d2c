"""Shared test helpers: build configs and drive a core to completion."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core import (
    Batch,
    CacheConfig,
    EngineConfig,
    EngineCore,
    ExitConfig,
    SchedulerConfig,
    TokenEvent,
)
from engine.core.records import ArrivalSpec
from engine.core.request import Stage
from engine.core.seeded_executor import SeededExecutor
from engine.core.shapes import TINY


def make_config(
    arm: str = "atomic",
    *,
    max_num_seqs: int = 4,
    max_num_batched_tokens: int = 16,
    prefill_chunk_size: int = 8,
    num_blocks: int = 256,
    block_size: int = 4,
    exit: ExitConfig | None = None,
    incremental: bool = False,
    prefix_caching: bool = False,
    **sched: object,
) -> EngineConfig:
    return EngineConfig(
        model=TINY,
        scheduler=SchedulerConfig(
            arm=arm, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            prefill_chunk_size=prefill_chunk_size, **sched,  # type: ignore[arg-type]
        ),
        cache=CacheConfig(num_blocks=num_blocks, block_size=block_size,
                          incremental_allocation=incremental,
                          enable_prefix_caching=prefix_caching),
        exit=exit or ExitConfig(),
    )


@dataclass
class Drive:
    batches: list[Batch] = field(default_factory=list)
    events: list[TokenEvent] = field(default_factory=list)


def check_request_kv(core: EngineCore) -> None:
    """Every live request holds exactly the allocation the block manager files under its
    (request_id, generation), or none when it holds no KV."""
    bm = core.block_manager
    for req in core.requests.values():
        held = bm.allocation((req.request_id, req.generation))
        assert req.kv is held, f"request {req.request_id}: Request.kv is not its allocation"


def drive(
    core: EngineCore, ex: SeededExecutor, max_steps: int = 10_000, check: bool = True,
) -> Drive:
    """Run schedule/execute/apply until the core has no work; time advances 1 per step."""
    out = Drive()
    now = 0.0
    for _ in range(max_steps):
        if not core.has_work():
            break
        batch = core.schedule(now)
        assert batch is not None, "core has work but scheduled nothing (deadlock)"
        result = ex.execute(batch)
        now += 1.0
        out.batches.append(batch)
        out.events.extend(core.apply(batch, result, now))
        if check:
            core.block_manager.check_integrity()
            check_request_kv(core)
    else:
        raise AssertionError(f"did not drain within {max_steps} steps")
    ex.execute(Batch(-1, batch.stage, (), core.take_housekeeping())) if out.batches else None
    return out


class ListSource:
    """Timed arrivals plus arrivals triggered by (request, token index); reusable across
    runs (triggers are read, not consumed)."""

    def __init__(self, timed: list[ArrivalSpec],
                 triggers: dict[tuple[str, int], list[ArrivalSpec]] | None = None) -> None:
        self.timed = timed
        self.triggers = triggers or {}

    def initial(self) -> list[ArrivalSpec]:
        return list(self.timed)

    def on_token(self, event: TokenEvent) -> list[ArrivalSpec]:
        return list(self.triggers.get((event.request_id, event.index), []))

    def triggers_on_tokens(self) -> bool:
        return bool(self.triggers)


def stage(intercept_s: float, grid: dict[str, object] | None = None,
          **coef: float) -> dict[str, object]:
    """One stage of a profile document: intercept plus linear terms (feature=coefficient)."""
    out: dict[str, object] = {"features": list(coef), "coef": list(coef.values()),
                              "intercept_s": intercept_s}
    if grid is not None:
        out["grid"] = grid
    return out


def profile_doc(model: str, hardware: str, stages: dict[str, object],
                step_gap: dict[str, object] | None = None,
                **provenance: object) -> dict[str, object]:
    """A calibrated-profile document (``loopserve-profile/1``) around hand-written stages;
    provenance fields default to a test CPU and can be overridden."""
    doc: dict[str, object] = {
        "format": "loopserve-profile/1", "hardware": hardware, "model": model,
        "provenance": {"device": "test", "torch_version": "x", "dtype": "float32",
                       "commit": "abc", "date": "2026-01-01", **provenance},
        "stages": stages,
    }
    if step_gap is not None:
        doc["step_gap"] = step_gap
    return doc


def check_drained(core: EngineCore, ex: SeededExecutor, seen_handles: set[int]) -> None:
    """A drained core hands the runner its last housekeeping and holds nothing: no KV block,
    reservation or prompt state, and the runner side was told of every prompt-state handle
    the batches used (``seen_handles``)."""
    ex.execute(Batch(-1, Stage.PRELUDE, (), core.take_housekeeping()))
    assert core.block_manager.num_used_blocks == 0 and core.block_manager.num_reserved_blocks == 0
    assert core.prompt_states.num_in_use == 0
    assert seen_handles <= ex.released_handles
