"""The cost-model interface, hardware presets and the batch geometry all models share.

A cost model turns a step, a ``StepContext``, into simulated seconds. The context holds the
scheduled ``Batch``, exactly what the executor would run (the stage, and per core call,
``Batch.core_call_items``, the items with their rows, positions and depths), and what the
engine did before it: the previous batch and how long the engine sat idle (``Waits`` counts
it over an engine's steps). A base model prices the batch; each measured effect of what came
before (``sim.cost.after_idle``) is a module of its own that wraps a base model
(``sim.cost.resolve.compose``). A cost model never mutates the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engine.core.batch import Batch, ItemKind, ScheduledItem


@dataclass(slots=True, eq=False, init=False)
class StepContext:
    """One step as a cost model sees it: ``batch``, and what the engine did before it.

    ``prev`` is the step that ran just before it on the same engine (None for the first);
    ``idle_s`` how long the engine last sat idle (0 if it never has) and ``since_idle`` how
    many steps ran back to back between the first step after that wait and this one (0: this
    is that step), as ``Waits`` counts them. Read-only by contract.
    """

    batch: Batch
    prev: Batch | None
    idle_s: float
    since_idle: int

    # Written out (init=False): the step clock builds one per step, and a dataclass-generated
    # __init__ stays interpreted even when mypyc compiles the class.
    def __init__(self, batch: Batch, prev: Batch | None = None, idle_s: float = 0.0,
                 since_idle: int = 0) -> None:
        self.batch = batch
        self.prev = prev
        self.idle_s = idle_s
        self.since_idle = since_idle


class Waits:
    """Counts a ``StepContext``'s ``idle_s`` and ``since_idle`` over the steps of one engine:
    the simulator counts the steps it runs with it, and fidelity the measured steps it
    prices, so both charge the same steps. A gap of at most ``from_s`` is back to back."""

    def __init__(self, from_s: float = 0.0) -> None:
        self.from_s = from_s
        self.idle_s = 0.0  # the last wait (0 before any)
        self.since_idle = 0  # steps between the first one after it and this one

    def start(self, gap_s: float) -> None:
        """A step starts ``gap_s`` after the last one ended (the first: after the run began)."""
        if gap_s > self.from_s:
            self.idle_s, self.since_idle = gap_s, 0
        else:
            self.since_idle += 1


class CostModel(Protocol):
    """How long a step takes in the simulator.

    ``step_time(ctx)`` returns the simulated duration of the whole step ``ctx.batch`` in
    seconds: an atomic PREFILL step or a prompt shortcut covers all of its core calls, PRELUDE
    and CODA steps cost what their stage costs. It must be deterministic and side-effect free,
    and cheap (it runs once per simulated step). ``ctx`` is the caller's: the step clock
    hands every call the same context, updated in place, so a model reads it during the call
    and keeps nothing of it (it may keep ``ctx.batch``, which is not reused). The models here
    (roofline, constant, calibrated, ``AfterIdleCost``) keep neither.

    ``breakdown(batch)`` returns named terms in seconds (keys such as ``weights_s``,
    ``kv_s``, ``attention_s``, ``host_s``, ``embed_s``, ``lm_head_s``) plus ``total_s``,
    which equals ``step_time(StepContext(batch))``. Terms are for reports; they need not add
    up to the total (a roofline takes the max of memory and compute time per call).
    """

    def step_time(self, ctx: StepContext) -> float:
        """Simulated seconds the step ``ctx.batch`` takes after what ``ctx`` says came
        before it (a model reads only what it charges for)."""

    def breakdown(self, batch: Batch) -> dict[str, float]:
        """Named cost terms of the step, in seconds, plus ``total_s``."""


class SplitCostModel(CostModel, Protocol):
    """A cost model that prices the runner's ``execute`` apart from the host gap before the
    step (``sim.cost.calibrated``): what a measured effect on execute time scales, and what
    fidelity compares with measured steps. ``step_time(ctx)`` is execute plus gap."""

    def split(self, ctx: StepContext) -> tuple[str, float, float]:
        """``(kind, execute_s, gap_s)``: the step kind that priced it (a profile stage), the
        seconds of ``execute(ctx.batch)`` and the host seconds before the step."""

    def execute_time(self, ctx: StepContext) -> float:
        """Seconds of the runner's ``execute(ctx.batch)`` alone."""

    def gap_time(self, batch: Batch) -> float:
        """Host seconds between the previous step's end and this step's start."""


@dataclass(frozen=True, slots=True)
class HardwarePreset:
    """Throughput and overhead numbers of one device class.

    ``host_call_s`` + ``host_layer_s`` x num_layers is the host cost of one core call (launches,
    metadata); ``step_overhead_s`` is the scheduler's per-step cost; ``sampling_s`` is the
    CODA step's sampling cost on top of lm_head. ``readback_s`` is what one exit-signal
    readback adds to a recurrent step (RFC §4): the device-to-host copy of a few floats and
    the host's wait for the device to drain before it, during which it prepares nothing
    (a CODA step's readback is part of ``sampling_s``).
    """

    name: str
    mem_bw_bytes_s: float
    matmul_flops_s: float
    host_call_s: float
    host_layer_s: float
    step_overhead_s: float
    sampling_s: float
    dtype_bytes: int
    readback_s: float = 0.0


HARDWARE: dict[str, HardwarePreset] = {
    # H200 SXM: ~4.3 TB/s measured copy bandwidth, ~790 TFLOP/s dense bf16 matmul; a
    # readback is a pinned DtoH copy plus a stream sync, ~10 us each way (docs/contracts.md).
    "h200": HardwarePreset(
        name="h200", mem_bw_bytes_s=4.3e12, matmul_flops_s=790e12, host_call_s=40e-6,
        host_layer_s=0.0, step_overhead_s=30e-6, sampling_s=20e-6, dtype_bytes=2,
        readback_s=20e-6,
    ),
    # A 2-core x86 VM running eager torch in fp32: ~20 GB/s streaming reads, ~60 GFLOP/s
    # sgemm, ~10 eager ops per layer at ~10 us each.
    "cpu": HardwarePreset(
        name="cpu", mem_bw_bytes_s=20e9, matmul_flops_s=60e9, host_call_s=100e-6,
        host_layer_s=100e-6, step_overhead_s=100e-6, sampling_s=50e-6, dtype_bytes=4,
        readback_s=10e-6,
    ),
}


def get_hardware(name: str) -> HardwarePreset:
    """The preset called ``name``; ValueError naming the known presets otherwise."""
    try:
        return HARDWARE[name]
    except KeyError:
        raise ValueError(
            f"hardware: unknown preset {name!r}; use one of {', '.join(HARDWARE)}"
        ) from None


def item_context(item: ScheduledItem) -> tuple[int, int, int]:
    """``(kv_tokens, context_sum, context_max)`` of one item in one core call.

    A decode row at position p attends to p + 1 positions of its depth plane (its own K/V
    included). A prompt item over [s, s + n) is one causal sequence: row i attends to
    s + i + 1 positions, and a flash-style kernel streams the item's s + n positions once.
    """
    if item.kind is ItemKind.DECODE:
        ctx = item.position + 1
        return ctx, ctx, ctx
    s, n = item.position, item.num_tokens
    return s + n, n * s + n * (n + 1) // 2, s + n
