"""Turn a validated scenario into the core's configs: ``ModelShape`` and ``EngineConfig``.

Building an ``EngineConfig`` runs the core's own validation (the mixed guard, rejections);
its ``ValueError("field: ...")`` is re-raised as a ``UserError`` that names the arm and the
sweep point, so a failing combination stops the run before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from engine.core.config import CacheConfig, EngineConfig, ExitConfig, ModelShape, SchedulerConfig
from engine.core.guarded_read import FileReadError, read_json
from engine.core.shapes import MODEL_SHAPES, shape_from_hf
from loopserve.errors import UserError
from loopserve.schema.scenario import Scenario


def model_shape(model: str) -> ModelShape:
    """The shape of a preset name or of an HF checkpoint directory's ``config.json``."""
    if model in MODEL_SHAPES:
        return MODEL_SHAPES[model]
    path = Path(model) / "config.json"
    try:
        cfg = read_json(path)
    except FileReadError as err:
        raise UserError("model", f"checkpoint config {err}") from None
    if not isinstance(cfg, dict):
        raise UserError("model", f"{path}: must hold a JSON object, not {type(cfg).__name__}")
    try:
        return shape_from_hf(cfg)
    except (ValueError, TypeError) as err:
        raise UserError("model", f"{path}: {err}") from None


def scheduler_config(scn: Scenario, arm: str) -> SchedulerConfig:
    """The arm's scheduler: shared values, then ``arm_overrides[arm]`` on top."""
    values = scn.scheduler.model_dump()
    override = scn.arm_overrides.get(arm)
    if override is not None:
        values.update(override.model_dump(exclude_unset=True, exclude_none=True))
    return SchedulerConfig(arm=arm, **values)


def exit_config(scn: Scenario) -> ExitConfig:
    e = scn.exit
    return ExitConfig(
        mode=e.mode,
        exit_threshold=float(e.exit_threshold),
        min_loops=e.min_loops,
        max_loops=e.max_loops,
        probs=tuple(e.probs) if e.probs is not None else None,
        seed=scn.seed if e.seed is None else e.seed,
    )


def engine_config(
    scn: Scenario, arm: str, shape: ModelShape, lifetime_tokens: int, context: str = ""
) -> EngineConfig:
    """Build and validate the arm's EngineConfig; ``cache.num_blocks: null`` is sized for
    ``max_num_seqs`` requests of ``lifetime_tokens`` each."""
    where = f"arm {arm}" + (f", {context}" if context else "")
    try:
        sched = scheduler_config(scn, arm)
        c = scn.cache
        num_blocks = c.num_blocks
        if num_blocks is None:
            probe = CacheConfig(block_size=c.block_size, layout=c.layout)
            per_request = probe.required_blocks(lifetime_tokens, shape.num_depths)
            num_blocks = max(1, sched.max_num_seqs * per_request)
        cache = CacheConfig(
            num_blocks=num_blocks, block_size=c.block_size, layout=c.layout,
            incremental_allocation=c.incremental_allocation,
            enable_prefix_caching=c.enable_prefix_caching,
        )
        cfg = EngineConfig(model=shape, scheduler=sched, cache=cache, exit=exit_config(scn))
    except ValueError as err:
        raise UserError.from_value_error(err, "scheduler", where) from None
    lambdas = scn.exit.lambdas
    if lambdas is not None and len(lambdas) != shape.num_depths:
        raise UserError(
            "exit.lambdas",
            f"needs {shape.num_depths} entries (one mean λ per depth), got {len(lambdas)}",
        )
    return cfg


def lifetime_bound(workload: Mapping[str, Any], initial_lifetimes: Iterable[int]) -> int:
    """Longest request lifetime (prompt + output - 1 tokens) a workload can submit.

    Uses the timed arrivals the source knows up front and every ``*prompt_tokens`` /
    ``*output_tokens`` pair in the workload spec (fixed ints, or a distribution's
    ``value``/``high``/``max``), which covers prompts injected later.
    """
    best = max(initial_lifetimes, default=1)
    for group in _mappings(workload):
        for key, value in group.items():
            if not key.endswith("prompt_tokens"):
                continue
            prefix = key[: -len("prompt_tokens")]
            prompt = _upper(value)
            output = _upper(group.get(prefix + "output_tokens"))
            if prompt is not None and output is not None:
                best = max(best, prompt + output - 1)
    return best


def _mappings(node: Any) -> Iterable[Mapping[str, Any]]:
    if isinstance(node, Mapping):
        yield node
        for value in node.values():
            yield from _mappings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _mappings(value)


def _upper(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        for key in ("value", "max", "high"):
            if isinstance(value.get(key), int):
                return int(value[key])
    return None
