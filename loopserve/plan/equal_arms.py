"""Equal arms (RFC §6): "All three use the same budget, max_num_seqs and chunk size".

Per sweep point the arms' engine configs must agree on ``max_num_batched_tokens``,
``max_num_seqs`` and the chunk they run (``effective_chunk_size``); a scenario that lets them
differ (``arm_overrides``) is refused with the first differing field, unless it says
``allow_unequal_arms: true``, and then the report flags every difference. The exit-signal
readback (``readback_skip``) is not compared: A0 reading it back is the RFC's own design.
Under ``chunk_policy: derive`` every arm runs the one effective chunk the mixed guard
derives (``engine.core.config.SchedulerConfig``), logged once and recorded in scenario.yaml
and env.json (``derived_chunks``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from engine.core.config import EngineConfig
from loopserve.errors import UserError

# (SchedulerConfig attribute, the scenario field that sets it)
EQUAL_FIELDS: tuple[tuple[str, str], ...] = (
    ("max_num_batched_tokens", "max_num_batched_tokens"),
    ("max_num_seqs", "max_num_seqs"),
    ("effective_chunk_size", "prefill_chunk_size"),
)


def unequal_fields(configs: Mapping[str, EngineConfig]) -> list[str]:
    """Each field the arms of one point run with different values, as one sentence each
    ("max_num_seqs: atomic 8, mixed 16")."""
    out = []
    for attr, name in EQUAL_FIELDS:
        values = {arm: getattr(cfg.scheduler, attr) for arm, cfg in configs.items()}
        if len(set(values.values())) > 1:
            out.append(f"{name}: " + ", ".join(f"{a} {v}" for a, v in values.items()))
    return out


def check_point(configs: Mapping[str, EngineConfig], allow: bool, context: str) -> list[str]:
    """The point's differences (empty when equal); UserError naming the first one unless
    ``allow`` (the scenario's ``allow_unequal_arms``)."""
    diffs = unequal_fields(configs)
    if diffs and not allow:
        where = f" ({context})" if context else ""
        field = diffs[0].partition(":")[0]
        raise UserError(
            f"scheduler.{field}",
            f"the arms differ{where}: {diffs[0]}; RFC §6 runs every arm with the same budget, "
            "max_num_seqs and chunk: drop the arm_overrides entry or set "
            "allow_unequal_arms: true",
        )
    return diffs


def log_derived(chunks: Mapping[int, int], configured: Mapping[int, int]) -> None:
    """One stderr line for the whole plan naming the derived chunk of every point."""
    if not chunks:
        return
    parts = ", ".join(f"point {p}: {configured[p]} -> {c}" for p, c in sorted(chunks.items()))
    print(f"loopserve: chunk_policy derive: every arm runs the derived chunk ({parts})",
          file=sys.stderr)


def scenario_comment(chunks: Mapping[int, int]) -> str:
    """The scenario.yaml header line that records the derived chunks (a YAML comment, so the
    file stays loadable: the chunk is derived again from the same values)."""
    if not chunks:
        return ""
    parts = ", ".join(f"point {p}: {c}" for p, c in sorted(chunks.items()))
    return f"# chunk_policy derive: effective prefill chunk of every arm ({parts})\n"
