"""The pure scheduling core: no torch, no simpy, no clock (``now`` is passed in).

Compiled with mypyc when ``make native`` has built it (loaded by ``engine._native``)."""

from engine.core.batch import Batch, FinalizeOp, Housekeeping, ItemKind, ScheduledItem
from engine.core.block_manager import BlockManager
from engine.core.config import (
    CacheConfig,
    EngineConfig,
    ExitConfig,
    ModelShape,
    SchedulerConfig,
    resolve_arm,
)
from engine.core.engine_core import EngineCore
from engine.core.errors import KVIntegrityError, StaleResultError
from engine.core.executor import Executor
from engine.core.exits import ExitDecider, make_decider, stable_seed
from engine.core.policies import AtomicPolicy, MixedPolicy, PerDepthPolicy
from engine.core.request import (
    PromptItem,
    PromptStateHandle,
    Request,
    RequestStatus,
    SamplingParams,
    Stage,
)
from engine.core.results import CodaResult, RecurrentResult, StepRecord, StepResult, TokenEvent
from engine.core.scheduler import Policy, Scheduler

__all__ = [
    "AtomicPolicy",
    "Batch",
    "BlockManager",
    "CacheConfig",
    "CodaResult",
    "EngineConfig",
    "EngineCore",
    "ExitConfig",
    "ExitDecider",
    "Executor",
    "FinalizeOp",
    "Housekeeping",
    "ItemKind",
    "KVIntegrityError",
    "MixedPolicy",
    "ModelShape",
    "PerDepthPolicy",
    "Policy",
    "PromptItem",
    "PromptStateHandle",
    "Request",
    "RecurrentResult",
    "RequestStatus",
    "SamplingParams",
    "ScheduledItem",
    "Scheduler",
    "SchedulerConfig",
    "StaleResultError",
    "Stage",
    "StepRecord",
    "StepResult",
    "TokenEvent",
    "make_decider",
    "resolve_arm",
    "stable_seed",
]
