"""Run validity (RFC §6): a run counts only if the comparison it claims is fair.

Two rules: an injected request must find a free slot and enough free KV blocks for its
lifetime when it is submitted (checked by the driver at submission, see
``injection_problem``), and a run of a mixing arm (mixed, wavefront) must form at least one
mixed core call (``check``), unless its cluster is disaggregated: there no replica sees
prompts and decode rows together, so the arm has nothing to mix.
"""

from __future__ import annotations

from engine.core.arrivals import injection_problem
from engine.core.config import MIXING_ARMS, resolve_arm
from engine.core.records import RunRecords
from sim.cluster import cluster_info

__all__ = ["NO_MIXED_CALL", "check", "injection_problem"]

NO_MIXED_CALL = "mixed arm formed no mixed core call"


def check(records: RunRecords, arm: str) -> list[str]:
    """All reasons the run is invalid: those recorded at submission, plus
    ``NO_MIXED_CALL`` for a mixing arm's run without a mixed core call. Empty means valid."""
    reasons = list(records.invalid_reasons)
    info = cluster_info(records)
    if (resolve_arm(arm) in MIXING_ARMS and records.num_mixed_core_calls == 0
            and not (info is not None and info.disaggregated)):
        reasons.append(NO_MIXED_CALL)
    return reasons
