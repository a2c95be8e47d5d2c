"""Workloads: pydantic specs (discriminator ``kind``) that build an ``ArrivalSource``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from engine.core.records import ArrivalSource
from loopserve.workloads.base import (
    FixedLength,
    LengthSpec,
    LognormalLength,
    SharedPrefix,
    StaticSource,
    UniformLength,
    length_max,
    prompt_ids,
)
from loopserve.workloads.interference import Injection, InterferenceWorkload
from loopserve.workloads.poisson import GammaWorkload, PoissonWorkload
from loopserve.workloads.sharegpt import ShareGPTWorkload, approx_tokens, load_sharegpt
from loopserve.workloads.trace import TraceRow, TraceWorkload, load_trace

WorkloadSpec = Annotated[
    InterferenceWorkload | PoissonWorkload | GammaWorkload | TraceWorkload | ShareGPTWorkload,
    Field(discriminator="kind"),
]
_ADAPTER: TypeAdapter[WorkloadSpec] = TypeAdapter(WorkloadSpec)


def parse_workload(data: Mapping[str, Any]) -> WorkloadSpec:
    """Validate a workload mapping (pydantic ``ValidationError`` on bad input)."""
    return _ADAPTER.validate_python(data)


def build_source(
    spec: WorkloadSpec | Mapping[str, Any],
    *,
    seed: int,
    vocab_size: int,
    exit_trace: Sequence[int] | None = None,
) -> ArrivalSource:
    """The arrivals of ``spec`` (a workload model or mapping) for one run.

    ``exit_trace`` is a run-wide exit-depth pattern for exit mode ``trace``: requests without
    their own trace (a trace file's ``exit_depths``) get its first entry for their first token
    and its remaining entries, repeated, for the rest. Same ``seed``, same arrivals.
    """
    if isinstance(spec, Mapping):
        spec = parse_workload(spec)
    source: StaticSource = spec.build(seed=seed, vocab_size=vocab_size, exit_trace=exit_trace)
    return source


__all__ = [
    "FixedLength",
    "GammaWorkload",
    "Injection",
    "InterferenceWorkload",
    "LengthSpec",
    "LognormalLength",
    "PoissonWorkload",
    "ShareGPTWorkload",
    "SharedPrefix",
    "StaticSource",
    "TraceRow",
    "TraceWorkload",
    "UniformLength",
    "WorkloadSpec",
    "approx_tokens",
    "build_source",
    "length_max",
    "load_sharegpt",
    "load_trace",
    "parse_workload",
    "prompt_ids",
]
