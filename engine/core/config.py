"""Frozen, validated configuration for the scheduling core.

Every bad value raises ``ValueError`` naming the field, the value and what is allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from engine.core.arms import ARM_ALIASES as ARM_ALIASES
from engine.core.arms import DEFAULT_ARM as DEFAULT_ARM
from engine.core.arms import MIXED_REJECTIONS as MIXED_REJECTIONS
from engine.core.arms import MIXING_ARMS as MIXING_ARMS
from engine.core.arms import NOT_OFFERED as NOT_OFFERED
from engine.core.arms import Arm as Arm
from engine.core.arms import resolve_arm as resolve_arm

ExitMode = Literal["fixed", "ouro", "ouro_delayed", "random_lookahead", "trace", "categorical"]
EXIT_MODES: tuple[str, ...] = (
    "fixed",
    "ouro",
    "ouro_delayed",
    "random_lookahead",
    "trace",
    "categorical",
)


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")


def _non_negative(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name}: must be an integer >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The shape facts the core and cost models need (no weights)."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_depths: int = 4

    def __post_init__(self) -> None:
        for name in (
            "num_layers",
            "hidden_size",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "num_depths",
        ):
            _positive(f"model.{name}", getattr(self, name))
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"model.num_kv_heads: {self.num_kv_heads} must divide num_heads {self.num_heads}"
            )

    @property
    def core_params(self) -> int:
        """Parameters of the shared recurrent stack (layers + final norm excluded)."""
        h, i = self.hidden_size, self.intermediate_size
        q = self.num_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h
        return self.num_layers * (attn + 3 * h * i + 4 * h)


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Paged per-depth KV cache geometry.

    ``num_blocks`` counts physical blocks over all depth planes together.
    ``enable_prefix_caching`` reuses cached full prompt blocks across requests
    (``engine.core.prefix_cache``). Off by default, unlike vLLM V1: turning it on changes
    what a workload computes, so today's scenarios keep their results unless they ask for it.
    """

    num_blocks: int = 1024
    block_size: int = 16
    layout: Literal["last_exited", "shared"] = "last_exited"
    incremental_allocation: bool = False
    enable_prefix_caching: bool = False

    def __post_init__(self) -> None:
        _positive("cache.num_blocks", self.num_blocks)
        _positive("cache.block_size", self.block_size)
        if self.layout not in ("last_exited", "shared"):
            raise ValueError(
                f"cache.layout: unknown layout {self.layout!r}; use last_exited|shared"
            )
        if self.enable_prefix_caching and self.layout == "shared":
            raise ValueError(
                "cache.enable_prefix_caching: needs layout last_exited; under the shared "
                "layout a prompt position's K/V depends on where its chunk starts, so a cached "
                "block is not what another request would compute (set layout: last_exited or "
                "enable_prefix_caching: false)"
            )

    def num_planes(self, num_depths: int) -> int:
        return 1 if self.layout == "shared" else num_depths

    def required_blocks(self, num_tokens: int, num_depths: int) -> int:
        """Blocks over all planes to hold ``num_tokens`` positions."""
        return math.ceil(num_tokens / self.block_size) * self.num_planes(num_depths)


@dataclass(frozen=True, slots=True)
class ExitConfig:
    """How decode tokens leave the loop (docs/design.md). Per request, or engine default."""

    mode: ExitMode = "fixed"
    exit_threshold: float = 1.0
    min_loops: int = 1
    max_loops: int | None = None  # None: the model's num_depths
    probs: tuple[float, ...] | None = None  # categorical: one probability per depth 1..D
    seed: int = 0  # random_lookahead head seed

    def __post_init__(self) -> None:
        if self.mode not in EXIT_MODES:
            raise ValueError(
                f"exit.mode: unknown mode {self.mode!r}; use one of {'|'.join(EXIT_MODES)}")
        if not (0.0 <= float(self.exit_threshold)):
            raise ValueError(f"exit.exit_threshold: must be >= 0, got {self.exit_threshold!r}")
        _positive("exit.min_loops", self.min_loops)
        if self.max_loops is not None:
            _positive("exit.max_loops", self.max_loops)
            if self.max_loops < self.min_loops:
                raise ValueError(
                    f"exit.max_loops: {self.max_loops} is below min_loops {self.min_loops}"
                )
        if self.mode == "categorical":
            if not self.probs:
                raise ValueError("exit.probs: categorical mode needs one probability per depth")
            if any(p < 0 for p in self.probs) or not math.isclose(
                    sum(self.probs), 1.0, abs_tol=1e-6):
                raise ValueError(
                    f"exit.probs: must be non-negative and sum to 1, got {list(self.probs)}"
                )

    def resolved_max_loops(self, num_depths: int) -> int:
        m = num_depths if self.max_loops is None else self.max_loops
        if m > num_depths:
            raise ValueError(f"exit.max_loops: {m} exceeds the model's {num_depths} depths")
        if self.min_loops > m:
            raise ValueError(f"exit.min_loops: {self.min_loops} exceeds max_loops {m}")
        if self.probs is not None and len(self.probs) != num_depths:
            raise ValueError(
                f"exit.probs: needs {num_depths} entries (one per depth), got {len(self.probs)}"
            )
        return m


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Scheduling limits and the arm. Validated against the guard when built."""

    arm: str = DEFAULT_ARM
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 256
    prefill_chunk_size: int = 128
    max_prefill_batches_before_decode: int = 1
    min_coda_batch_size: int = 1
    admission_scan_limit: int = 16
    max_admission_bypasses: int = 1
    policy: Literal["fcfs", "priority"] = "fcfs"
    # RFC open question 3: when no decode item is ready, run a prompt item's remaining depths
    # in one step (mixed arm only).
    prompt_shortcut: bool = False
    # RFC open question 6: "reject" a config failing the mixed guard, or "derive" an effective
    # chunk min(prefill_chunk_size, max_num_batched_tokens - max_num_seqs + 1), in every arm.
    chunk_policy: Literal["reject", "derive"] = "reject"
    # RFC §4: skip the exit-signal readback when no decode item needs a signal. Off: a decode
    # step under ouro, ouro_delayed or random_lookahead reads its signal back on every loop,
    # threshold 1.0 included, as the engine the RFC starts from does (its A0).
    readback_skip: bool = True
    async_scheduling: bool = False
    cuda_graphs: bool = False
    speculative_decoding: bool = False
    pd_disaggregation: bool = False
    enable_preemption: bool = False
    no_refill: bool = False
    prefill_uva: bool = False
    static_buffers: bool = False
    padding: bool = False
    effective_chunk_size: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "arm", resolve_arm(self.arm))
        for name in ("max_num_seqs", "max_num_batched_tokens", "prefill_chunk_size",
                     "max_prefill_batches_before_decode", "min_coda_batch_size",
                     "admission_scan_limit"):
            _positive(f"scheduler.{name}", getattr(self, name))
        _non_negative("scheduler.max_admission_bypasses", self.max_admission_bypasses)
        if self.policy not in ("fcfs", "priority"):
            raise ValueError(f"scheduler.policy: unknown policy {self.policy!r}; use fcfs|priority")
        if self.chunk_policy not in ("reject", "derive"):
            raise ValueError(
                f"scheduler.chunk_policy: unknown value {self.chunk_policy!r}; use reject|derive"
            )
        for name in NOT_OFFERED:
            if getattr(self, name):
                if self.arm in MIXING_ARMS:
                    raise ValueError(
                        f"scheduler.{name}: not supported with the {self.arm} arm: "
                        f"{MIXED_REJECTIONS[name]}; set {name}: false"
                    )
                raise ValueError(
                    f"scheduler.{name}: not implemented in loopserve yet; set {name}: false"
                )
        if self.prompt_shortcut and self.arm != "mixed":
            raise ValueError(
                "scheduler.prompt_shortcut: applies to the mixed arm only; set it false or use "
                "arm: mixed"
            )
        object.__setattr__(self, "effective_chunk_size", self._check_guard())

    def _check_guard(self) -> int:
        chunk, seqs, budget = (
            self.prefill_chunk_size,
            self.max_num_seqs,
            self.max_num_batched_tokens,
        )
        derivable = self.chunk_policy == "derive" and budget - seqs + 1 >= 1
        if self.arm not in MIXING_ARMS:
            # derive: the chunk the mixed arm would run, so every arm runs the same one
            if derivable and chunk + seqs - 1 > budget:
                return budget - seqs + 1
            if chunk > budget:
                raise ValueError(
                    f"scheduler.prefill_chunk_size: {chunk} exceeds max_num_batched_tokens "
                    f"{budget}; set max_num_batched_tokens >= {chunk}"
                )
            return chunk
        if chunk + seqs - 1 <= budget:
            return chunk
        if derivable:
            return budget - seqs + 1
        raise ValueError(
            f"scheduler.max_num_batched_tokens: the {self.arm} arm needs prefill_chunk_size + "
            f"max_num_seqs - 1 <= max_num_batched_tokens, got {chunk} + {seqs} - 1 > {budget}; "
            f"set max_num_batched_tokens >= {chunk + seqs - 1} (e.g. "
            f"{_round_up_pow2(chunk + seqs - 1)})"
        )


    def max_chunks_in_flight(self, num_depths: int) -> int:
        """The most prompt chunks one request holds hidden state for at once: one outside
        the wavefront arm. Under it the chunks in flight sit at distinct depths (at most
        ``num_depths``), and a new chunk starts only in a step that also advances every
        earlier chunk in flight, all full chunks but the prompt's last, within the budget."""
        if self.arm != "wavefront":
            return 1
        per_step = (self.max_num_batched_tokens - 1) // self.effective_chunk_size + 1
        return min(num_depths, per_step)


def _round_up_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything the core needs: model shape, scheduler, cache and default exit config."""

    model: ModelShape
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    exit: ExitConfig = field(default_factory=ExitConfig)

    def __post_init__(self) -> None:
        if self.cache.layout == "shared" and self.scheduler.arm != "atomic":
            raise ValueError(
                f"cache.layout: shared is position-major and supports only the atomic arm, "
                f"not {self.scheduler.arm}; use layout: last_exited"
            )
        self.exit.resolved_max_loops(self.model.num_depths)

    @property
    def num_depths(self) -> int:
        return self.model.num_depths

    @property
    def max_prompt_states(self) -> int:
        """The memory bound on prompt state (RFC §1): hidden states of
        ``effective_chunk_size`` rows alive at once, one per request's in-flight chunk."""
        s = self.scheduler
        return s.max_num_seqs * s.max_chunks_in_flight(self.model.num_depths)
