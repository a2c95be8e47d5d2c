"""Scenario files: the pydantic schema, loading with ``--set`` overrides, and the conversion
to the core's ``EngineConfig`` (docs/design.md)."""

from loopserve.schema.build import engine_config, exit_config, lifetime_bound, model_shape
from loopserve.schema.load import load_scenario, parse_set, read_yaml, set_path, validate
from loopserve.schema.scenario import (
    CacheSpec,
    CostSpec,
    ExitSpec,
    Scenario,
    SchedulerOverride,
    SchedulerSpec,
    SloSpec,
)

__all__ = [
    "CacheSpec",
    "CostSpec",
    "ExitSpec",
    "Scenario",
    "SchedulerOverride",
    "SchedulerSpec",
    "SloSpec",
    "engine_config",
    "exit_config",
    "lifetime_bound",
    "load_scenario",
    "model_shape",
    "parse_set",
    "read_yaml",
    "set_path",
    "validate",
]
