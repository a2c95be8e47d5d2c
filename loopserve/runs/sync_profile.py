"""Host syncs measured by ``torch.profiler`` over an untimed run (RFC §6: "Host sync sites,
counts and wait times come from profiler traces in separate untimed runs over the same
workload, reported per step, per stage and per generated token").

A sync site is an operator that makes the host wait for a value on the device, counted once
at its outermost event. On CUDA: ``aten::_local_scalar_dense`` (``.item()``) or
``aten::_to_copy`` (``.cpu()``) with a ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
``cudaEventSynchronize`` or synchronous ``cudaMemcpy`` under it (the non-blocking uploads
from pinned memory have none), and those runtime calls on their own when no operator holds
them. On the CPU, where nothing waits, the sites are where a value moves to the host:
``.item()``, and a dtype-keeping ``aten::_to_copy`` called from Python (a readback copies,
``engine.readback``); the copies operators make of wrapped scalars and dtype conversions
are not sites, and neither is a ``.tolist()`` or a no-copy ``.cpu()``, which make no
event. A site's wait time is its event's duration. The runner counts its own readbacks
(``engine.readback``); the two must agree, step by step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

CPU_SITES = frozenset({"aten::_local_scalar_dense", "aten::_to_copy"})
BLOCKING_RUNTIME = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize",
                              "cudaEventSynchronize", "cudaMemcpy"})
STEP_PREFIX = "loopserve.step."


@dataclass
class StepInfo:
    """What the runner did in one profiled step."""

    step: int
    kind: str
    num_tokens: int  # output tokens the step produced (CODA rows)
    runner_readbacks: int
    start_us: float = 0.0
    end_us: float = 0.0
    syncs: list[tuple[str, float]] = field(default_factory=list)  # (site, wait_s)


# ScalarType codes (as a profile's concrete inputs give them) -> the names of input_dtypes
DTYPE_NAMES = {0: "unsigned char", 3: "int", 4: "long int", 5: "c10::Half", 6: "float",
               7: "double", 11: "bool", 15: "c10::BFloat16"}


def _is_site(ev: Any, cuda: bool) -> bool:
    name = ev.name
    if name in BLOCKING_RUNTIME:
        return True
    if name not in CPU_SITES:
        return False
    if cuda:
        return _blocks(ev)
    return name == "aten::_local_scalar_dense" or (_same_dtype(ev) and _called_directly(ev))


def _same_dtype(ev: Any) -> bool:
    """A copy that keeps the dtype (a move), not a conversion (``x.to(torch.int32)``)."""
    inputs, dtypes = list(ev.concrete_inputs or []), list(ev.input_dtypes or [])
    code = inputs[1] if len(inputs) > 1 else None
    return code is None or (bool(dtypes) and DTYPE_NAMES.get(code) == dtypes[0])


def _called_directly(ev: Any) -> bool:
    """Called from Python (``tensor.to(...)``), not inside another operator (the scalar
    an ``aten::add`` wraps is copied by an ``aten::_to_copy`` under it)."""
    parent = ev.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::") and parent.name != "aten::to":
            return False
        parent = parent.cpu_parent
    return True


def _blocks(ev: Any) -> bool:
    stack = list(ev.cpu_children)
    while stack:
        child = stack.pop()
        if child.name in BLOCKING_RUNTIME:
            return True
        stack.extend(child.cpu_children)
    return False


def _outermost(ev: Any, cuda: bool) -> bool:
    parent = ev.cpu_parent
    while parent is not None:
        if _is_site(parent, cuda):
            return False
        parent = parent.cpu_parent
    return True


def sync_sites(events: Iterable[Any], cuda: bool) -> list[tuple[str, float, float]]:
    """``(name, start_us, wait_s)`` of every sync site among a profile's events."""
    out = []
    for ev in events:
        if _is_site(ev, cuda) and _outermost(ev, cuda):
            out.append((ev.name, float(ev.time_range.start), ev.time_range.elapsed_us() / 1e6))
    return sorted(out, key=lambda s: s[1])


def assign(steps: Sequence[StepInfo], events: Iterable[Any], cuda: bool) -> list[tuple[str, float]]:
    """Put each sync site into the step whose window holds it (steps get their windows from
    their ``loopserve.step.*`` events, in order); the sites outside every step come back."""
    evs = list(events)
    windows = sorted((ev for ev in evs if ev.name.startswith(STEP_PREFIX)),
                     key=lambda e: e.time_range.start)
    if len(windows) != len(steps):
        raise RuntimeError(f"profile: {len(windows)} step events for {len(steps)} steps")
    for info, ev in zip(steps, windows, strict=True):
        info.start_us, info.end_us = ev.time_range.start, ev.time_range.end
    outside = []
    for name, start, wait in sync_sites(evs, cuda):
        owner = next((s for s in steps if s.start_us <= start <= s.end_us), None)
        if owner is None:
            outside.append((name, wait))
        else:
            owner.syncs.append((name, wait))
    return outside


def _group(steps: Sequence[StepInfo]) -> dict[str, Any]:
    syncs = sum(len(s.syncs) for s in steps)
    return {"steps": len(steps), "profiler_syncs": syncs,
            "runner_readbacks": sum(s.runner_readbacks for s in steps),
            "wait_s": sum(w for s in steps for _, w in s.syncs),
            "syncs_per_step": syncs / len(steps) if steps else None}


def arm_summary(steps: Sequence[StepInfo], outside: Sequence[tuple[str, float]]
                ) -> dict[str, Any]:
    """profile.json's entry of one arm: totals, per stage kind, per step and per site."""
    tokens = sum(s.num_tokens for s in steps)
    total = _group(steps)
    sites: dict[str, dict[str, float]] = {}
    for name, wait in [x for s in steps for x in s.syncs] + list(outside):
        site = sites.setdefault(name, {"count": 0, "wait_s": 0.0})
        site["count"] += 1
        site["wait_s"] += wait
    kinds = sorted({s.kind for s in steps})
    return {
        "profiler_syncs": total["profiler_syncs"] + len(outside),
        "runner_readbacks": total["runner_readbacks"],
        "syncs_outside_steps": len(outside),
        "num_steps": len(steps),
        "num_tokens": tokens,
        "syncs_per_token": (total["profiler_syncs"] + len(outside)) / tokens if tokens else None,
        "wait_s": total["wait_s"] + sum(w for _, w in outside),
        "sites": sites,
        "per_kind": {k: _group([s for s in steps if s.kind == k]) for k in kinds},
        "per_step": [{"step": s.step, "kind": s.kind, "profiler_syncs": len(s.syncs),
                      "runner_readbacks": s.runner_readbacks,
                      "wait_s": sum(w for _, w in s.syncs)} for s in steps],
    }


def mismatches(arm: str, summary: dict[str, Any]) -> list[str]:
    """Where the profiler and the runner disagree (empty when they agree everywhere)."""
    out = []
    if summary["profiler_syncs"] != summary["runner_readbacks"]:
        out.append(f"{arm}: the profiler saw {summary['profiler_syncs']} host syncs, the runner "
                   f"counted {summary['runner_readbacks']} readbacks "
                   f"({summary['syncs_outside_steps']} outside any step)")
    for row in summary["per_step"]:
        if row["profiler_syncs"] != row["runner_readbacks"]:
            out.append(f"{arm}: step {row['step']} ({row['kind']}): profiler "
                       f"{row['profiler_syncs']}, runner {row['runner_readbacks']}")
    return out
