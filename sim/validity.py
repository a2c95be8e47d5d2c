"""Run validity (RFC §6): a run counts only if the comparison it claims is fair.

Two rules: an injected request must find a free slot and enough free KV blocks for its
lifetime when it is submitted (checked by the driver at submission, see
``injection_problem``), and a mixed-arm run must form at least one mixed core call
(``check``).
"""

from __future__ import annotations

from engine.core.config import resolve_arm
from engine.core.engine_core import EngineCore
from engine.core.records import ArrivalSpec, RunRecords

NO_MIXED_CALL = "mixed arm formed no mixed core call"


def injection_problem(core: EngineCore, spec: ArrivalSpec, now_s: float) -> str | None:
    """Why an injected request submitted now would make the run invalid, or None."""
    max_num_seqs = core.cfg.scheduler.max_num_seqs
    if core.num_running >= max_num_seqs:
        return (
            f"injected request {spec.request_id} found no free slot at t={now_s:.6f}s "
            f"(num_running {core.num_running} == max_num_seqs {max_num_seqs})"
        )
    lifetime = len(spec.prompt_token_ids) + spec.params.max_tokens - 1
    need = core.kv.blocks_for(lifetime)
    free = core.kv.num_free_blocks
    if need > free:
        return (
            f"injected request {spec.request_id} found no KV capacity at t={now_s:.6f}s "
            f"(needs {need} blocks, {free} free)"
        )
    return None


def check(records: RunRecords, arm: str) -> list[str]:
    """All reasons the run is invalid: those recorded at submission, plus
    ``NO_MIXED_CALL`` for a mixed-arm run without a mixed core call. Empty means valid."""
    reasons = list(records.invalid_reasons)
    if resolve_arm(arm) == "mixed" and records.num_mixed_core_calls == 0:
        reasons.append(NO_MIXED_CALL)
    return reasons
