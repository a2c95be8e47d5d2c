"""The scheduling arms: their names and aliases, the default, and what the mixing arms reject."""

from __future__ import annotations

from typing import Literal

Arm = Literal["atomic", "per_depth", "mixed", "wavefront"]
ARM_ALIASES: dict[str, Arm] = {
    "atomic": "atomic",
    "a0": "atomic",
    "per_depth": "per_depth",
    "a1": "per_depth",
    "mixed": "mixed",
    "a2": "mixed",
    "wavefront": "wavefront",
    "a3": "wavefront",
}
ARMS: tuple[Arm, ...] = ("atomic", "per_depth", "mixed", "wavefront")
# The arms whose recurrent core calls mix decode rows with prompt rows (the guard applies).
MIXING_ARMS: frozenset[str] = frozenset({"mixed", "wavefront"})


# The product default arm (RFC §2's mixed batching), used by SchedulerConfig, LLM(...),
# make_engine_config, ServeOptions and `loopserve serve --arm`; scenarios list their arms.
DEFAULT_ARM: Arm = "mixed"


def resolve_arm(name: str) -> Arm:
    """Map an arm name or alias (A0/A1/A2/A3, any case) to its canonical name."""
    arm = ARM_ALIASES.get(str(name).lower())
    if arm is None:
        raise ValueError(
            f"scheduler.arm: unknown arm {name!r}; use one of atomic|per_depth|mixed|wavefront "
            "(aliases A0|A1|A2|A3)"
        )
    return arm


# Options a serving engine may offer that the mixing arms (RFC §5) reject, with the reason.
MIXED_REJECTIONS: dict[str, str] = {
    "async_scheduling": "mixed batching needs a mixed-depth packed metadata path and event-based "
    "prompt-state lifetimes for async scheduling (RFC §4)",
    "cuda_graphs": "mixed-depth packed batches are not validated under CUDA graph capture (RFC §7)",
    "speculative_decoding": "the speculative policy never schedules RECURRENT items",
    "pd_disaggregation": "the PD prefill worker takes PREFILL batches directly",
    "enable_preemption": "prompt-state snapshot and restore are not defined yet",
    "no_refill": "no_refill's cohort semantics conflict with mixing prompt and decode rows",
    "prefill_uva": "under mixing no prompt takes the atomic FA4 path that prefill UVA serves",
    "static_buffers": "static buffers are not validated with mixed batches",
    "padding": "row padding is not validated with mixed batches",
}
NOT_OFFERED: frozenset[str] = frozenset(MIXED_REJECTIONS)  # not implemented in any arm yet
