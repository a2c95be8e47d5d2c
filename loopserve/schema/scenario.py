"""The scenario schema (docs/design.md): strict pydantic models, unknown keys rejected.

The scheduler section mirrors ``engine.core.SchedulerConfig`` (every field except ``arm``,
which comes from ``arms``), generated from the dataclass so the two never drift apart. The
core's own checks (the mixed guard, rejections) run later, when a scenario is turned into an
``EngineConfig`` per arm and sweep point (``loopserve.schema.build``).
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    create_model,
    field_validator,
    model_validator,
)

from engine.core.config import SchedulerConfig, resolve_arm
from engine.core.shapes import MODEL_SHAPES
from loopserve.schema.cluster import ClusterSpec
from loopserve.schema.exit_spec import ExitSpec
from loopserve.schema.strict import StrictModel
from loopserve.workloads import WorkloadSpec
from loopserve.workloads.base import MAX_NUM_SEQS, MAX_REQUEST_TOKENS

Scalar = bool | int | float | str
# Fields a sweep or variant may not vary: they define the run itself.
UNSWEEPABLE = ("name", "arms", "repeats", "sweep", "variants", "model", "outputs", "tune")
# Upper bounds of sizes; the memory estimate (loopserve.plan.footprint) covers
# what fits below them.
SCHEDULER_BOUNDS = {"max_num_seqs": MAX_NUM_SEQS, "max_num_batched_tokens": MAX_REQUEST_TOKENS,
                    "prefill_chunk_size": MAX_REQUEST_TOKENS}
MAX_NUM_BLOCKS = (1 << 31) - 1  # block ids are int32 on the device
MAX_BLOCK_SIZE = 1024  # tokens per block (vLLM's largest is 256)
MAX_REPEATS = 1000
# sweep points (variants x the sweep grid) one scenario may plan: each point is a validated
# scenario held in memory, and a run per arm and repeat
MAX_SWEEP_POINTS = 10_000


def _scheduler_fields(optional: bool) -> dict[str, Any]:
    hints = typing.get_type_hints(SchedulerConfig)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(SchedulerConfig):
        if not f.init or f.name == "arm":
            continue
        hint = hints[f.name]
        if f.name in SCHEDULER_BOUNDS:
            hint = Annotated[hint, Field(le=SCHEDULER_BOUNDS[f.name])]
        out[f.name] = (hint | None, None) if optional else (hint, f.default)
    return out


SchedulerSpec: type[StrictModel] = create_model(
    "SchedulerSpec",
    __base__=StrictModel,
    __doc__="SchedulerConfig fields shared by all arms (defaults are the core's).",
    **_scheduler_fields(optional=False),
)
SchedulerOverride: type[StrictModel] = create_model(
    "SchedulerOverride",
    __base__=StrictModel,
    __doc__="Per-arm scheduler values that replace the shared ones.",
    **_scheduler_fields(optional=True),
)


class CostSpec(StrictModel):
    """The simulator's cost model: roofline (default), constant per core call, calibrated, or
    auto (the checked-in calibrated profile for the scenario's hardware and model when one
    exists under results/profiles/, else roofline)."""

    kind: Literal["roofline", "constant", "calibrated", "auto"] = "roofline"
    core_call_s: float | None = Field(default=None, gt=0)
    profile: str | None = None

    @model_validator(mode="after")
    def _needs(self) -> CostSpec:
        if self.kind == "constant" and self.core_call_s is None:
            raise ValueError("core_call_s: constant cost needs core_call_s (e.g. 0.001)")
        if self.kind == "calibrated" and not self.profile:
            raise ValueError("profile: calibrated cost needs profile: path/to/profile.json")
        if self.kind != "constant" and self.core_call_s is not None:
            raise ValueError(f"core_call_s: only for kind constant, not {self.kind}")
        if self.kind != "calibrated" and self.profile is not None:
            raise ValueError(f"profile: only for kind calibrated, not {self.kind}")
        return self


class CacheSpec(StrictModel):
    """KV cache geometry; ``num_blocks: null`` sizes it for max_num_seqs lifetimes.
    ``enable_prefix_caching`` (off by default, so existing scenarios keep their results)
    reuses cached full prompt blocks across requests, on every depth plane."""

    num_blocks: int | None = Field(default=None, ge=1, le=MAX_NUM_BLOCKS)
    block_size: int = Field(default=16, ge=1, le=MAX_BLOCK_SIZE)
    layout: Literal["last_exited", "shared"] = "last_exited"
    incremental_allocation: bool = False
    enable_prefix_caching: bool = False


class SloSpec(StrictModel):
    """Latency objectives drawn as lines in plots and checked in the report."""

    itl_p99_ms: float | None = Field(default=None, gt=0)
    ttft_p99_ms: float | None = Field(default=None, gt=0)


class RunnerSpec(StrictModel):
    """Real-engine settings (``--target cpu|cuda``); the simulator ignores them."""

    attention_backend: str = "auto"  # triton on cuda, torch on cpu; env.json says which ran
    # RECURRENT core calls replayed from CUDA graphs (cuda target only): decode-only calls, or
    # also mixed calls whose prompt rows fit a bucket; the rest run eager. Not yet validated
    # on a GPU (docs/gpu.md).
    cuda_graphs: Literal["off", "decode", "mixed"] = "off"
    dtype: Literal["float32", "bfloat16", "float16"] | None = None  # None: fp32 cpu, bf16 cuda
    warmup: bool = True  # one untimed run of the first arm first (allocator, kernels, caches)
    # torch intra-op threads on CPU (None: torch's default); calibrated CPU profiles record
    # theirs (1 by default), and a run measured with another count does not match them.
    num_threads: int | None = Field(default=None, ge=1)


class OutputsSpec(StrictModel):
    """What the run folder holds (``loopserve.outputs.records``): tables as Parquet (zstd) or
    CSV, and the per-token rows, which simulated runs write only when asked (real targets
    always write them: their token ids are data)."""

    format: Literal["parquet", "csv"] = "parquet"
    tokens: bool = False


class Scenario(StrictModel):
    """One scenario file. ``arms`` are canonical names after validation."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", max_length=80)
    model: str = "ouro-1.4b"
    hardware: str = "h200"
    cost: CostSpec = Field(default_factory=CostSpec)
    seed: int = Field(default=0, ge=0)
    repeats: int = Field(default=1, ge=1, le=MAX_REPEATS)
    arms: list[str]
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)  # type: ignore[valid-type]
    arm_overrides: dict[str, SchedulerOverride] = Field(default_factory=dict)  # type: ignore[valid-type]
    # RFC §6: every arm runs the same budget, max_num_seqs and chunk; true lets arm_overrides
    # change them (loopserve.plan.equal_arms), and the report flags it.
    allow_unequal_arms: bool = False
    cache: CacheSpec = Field(default_factory=CacheSpec)
    exit: ExitSpec = Field(default_factory=ExitSpec)
    workload: WorkloadSpec
    sweep: dict[str, list[Scalar]] | None = None
    variants: dict[str, dict[str, Scalar]] | None = None
    tune: dict[str, list[Scalar]] | None = Field(
        default=None, description="loopserve tune's search space: a dotted scenario field "
        "(scheduler.max_num_seqs, cache.enable_prefix_caching...) or arm -> values to try")
    slo: SloSpec | None = None
    runner: RunnerSpec = Field(default_factory=RunnerSpec)
    outputs: OutputsSpec = Field(default_factory=OutputsSpec)
    # simulator only: replicas behind a router, or prefill/decode disaggregation
    cluster: ClusterSpec | None = None
    _base_dir: Path | None = PrivateAttr(default=None)

    @property
    def base_dir(self) -> Path | None:
        """The scenario file's folder (None for one built in memory): ``cost: auto`` looks
        for a profile beside it (``sim.cost.resolve``), never in the working directory."""
        return self._base_dir

    def located(self, base_dir: Path | None) -> Scenario:
        """This scenario, read from a file in ``base_dir``."""
        self._base_dir = base_dir
        return self

    @field_validator("arms")
    @classmethod
    def _arms(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError(
                "empty; list at least one of atomic|per_depth|mixed|wavefront (A0|A1|A2|A3)")
        arms = [_arm(name) for name in v]
        dup = sorted({a for a in arms if arms.count(a) > 1})
        if dup:
            raise ValueError(f"{', '.join(dup)} listed twice; list each arm once")
        return arms

    @field_validator("arm_overrides")
    @classmethod
    def _override_arms(cls, v: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        given: dict[str, str] = {}
        for name, override in v.items():
            arm = _arm(name)
            if arm in out:  # A0 and atomic name one arm: the last would win
                raise ValueError(f"{name}: names the same arm as {given[arm]} ({arm}); "
                                 "merge them into one entry")
            out[arm], given[arm] = override, name
        return out

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        if v in MODEL_SHAPES or (Path(v) / "config.json").exists():  # read: schema.build
            return v
        raise ValueError(
            f"unknown preset {v!r}; use one of {'|'.join(MODEL_SHAPES)} or a checkpoint "
            "directory holding config.json"
        )

    @field_validator("sweep", "variants", "tune")
    @classmethod
    def _dotted_keys(cls, v: dict[str, Any] | None, info: Any) -> dict[str, Any] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("empty; give at least one entry or remove the section")
        fields = v.values() if info.field_name == "variants" else [v]
        if info.field_name == "tune":
            return _tune_keys(v)
        for group in fields:
            for key, values in group.items():
                if key.split(".")[0] in UNSWEEPABLE:
                    raise ValueError(f"{key}: cannot be swept; vary scheduler/cache/exit/workload")
                if isinstance(values, list) and not values:
                    raise ValueError(f"{key}: empty list; give at least one value")
                if isinstance(values, list):
                    _distinct(key, values)
        return v

    @model_validator(mode="after")
    def _bounded_sweep(self) -> Scenario:
        # An override of an arm that this run leaves out (``--set arms=[mixed]`` on a scenario
        # written for all three) stays in the scenario and applies whenever that arm runs.
        num_points = max(len(self.variants or {}), 1)
        for values in (self.sweep or {}).values():
            num_points *= len(values) if isinstance(values, list) else 1
        if num_points > MAX_SWEEP_POINTS:
            raise ValueError(f"sweep: {num_points} points (variants x the sweep lists) is past "
                             f"the upper bound; use at most {MAX_SWEEP_POINTS}")
        if self.sweep and self.variants:
            for name, values in self.variants.items():
                both = sorted(set(values) & set(self.sweep))
                if both:
                    raise ValueError(
                        f"variants.{name}.{both[0]}: also swept; vary it in one place only"
                    )
        return self

    @property
    def is_sweep(self) -> bool:
        return bool(self.sweep) or bool(self.variants)


def _arm(name: str) -> str:
    try:
        return resolve_arm(name)
    except ValueError:
        raise ValueError(
            f"unknown arm {name!r}; use atomic|per_depth|mixed|wavefront (aliases A0|A1|A2|A3)"
        ) from None


def _distinct(key: str, values: list[Any]) -> None:
    """A sweep list names each value once (two equal points would be one point run twice):
    numbers compare by value, so 16 and 16.0 are one point."""
    seen: dict[tuple[str, Any], Any] = {}
    for v in values:
        numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
        tag = ("number", float(v)) if numeric else (type(v).__name__, v)
        if tag in seen:
            again = "" if seen[tag] == v and type(seen[tag]) is type(v) else f" (as {seen[tag]!r})"
            raise ValueError(f"{key}: {v!r} listed twice{again}; list each value once")
        seen[tag] = v


def _tune_keys(v: dict[str, Any]) -> dict[str, Any]:
    """A tune space: each key a dotted field other than the run's identity, or ``arm``
    (values canonical arm names); each list non-empty with distinct values."""
    for key, values in v.items():
        if key != "arm" and key.split(".")[0] in UNSWEEPABLE:
            raise ValueError(f"{key}: cannot be tuned; tune arm, scheduler/cache/exit/workload "
                             "fields")
        if not values:
            raise ValueError(f"{key}: empty list; give at least one value")
        if key == "arm":
            values = v[key] = [_arm(str(a)) for a in values]
        _distinct(key, values)
    return v
