"""Whether a fidelity run meets the project's targets, and whether the machine held still
long enough for the answer to mean anything.

Targets (for the CPU ``small`` model): every arm's ITL p50 and
TTFT p50 within 10% of measured, ITL p99 within 15%. Beside the verdict, whether the machine
held still (``loopserve.fidelity.machine.unsteady``): on a shared machine a miss when it did
not says more about the neighbours than about the model.
"""

from __future__ import annotations

from collections.abc import Mapping

from loopserve.fidelity.json_types import (
    ArmErrors,
    DriftSection,
    FastestErrors,
    Machine,
    TargetsSection,
    Verdicts,
)
from loopserve.fidelity.machine import unsteady

LIMITS: dict[str, float] = {"itl_p50_ms": 0.10, "ttft_p50_ms": 0.10, "itl_p99_ms": 0.15}


def _check(arms: Mapping[str, ArmErrors | FastestErrors]) -> Verdicts:
    per_arm: Verdicts = {}
    for arm, metrics in arms.items():
        per_arm[arm] = {}
        for name, limit in LIMITS.items():
            row = metrics.get(name)
            err = row.get("rel_error") if isinstance(row, dict) else None
            per_arm[arm][name] = None if err is None else abs(err) <= limit
    return per_arm


def _all(per_arm: Verdicts) -> bool:
    return all(v is True for row in per_arm.values() for v in row.values())


def targets(
    arms: dict[str, ArmErrors], drift: DriftSection, machine: Machine,
    vs_fastest: dict[str, FastestErrors] | None = None,
) -> TargetsSection:
    """The ``targets`` section of fidelity.json: checked against the median of the measured
    repeats (``arms``) and, with several repeats, against the fastest one."""
    per_arm = _check(arms)
    fastest = _check(vs_fastest) if vs_fastest else None
    reasons = unsteady(drift, machine)
    return {
        "limits": LIMITS,
        "arms": per_arm,
        "all_met": _all(per_arm),
        "arms_vs_fastest_repeat": fastest,
        "all_met_vs_fastest_repeat": None if fastest is None else _all(fastest),
        "machine_steady": not reasons,
        "unsteady": reasons,
    }


def _verdict(per_arm: Verdicts) -> str:
    met = [a for a, row in per_arm.items() if all(v is True for v in row.values())]
    missed = [a for a in per_arm if a not in met]
    return f"met in {', '.join(met) or 'no arm'}" + (
        f"; missed in {', '.join(missed)}" if missed else "")


def target_lines(section: TargetsSection) -> list[str]:
    """Lines for the printed table."""
    lines = ["targets (ITL p50 and TTFT p50 within 10%, ITL p99 within 15%) vs the median "
             f"measured run: {_verdict(section['arms'])}"]
    if fastest := section.get("arms_vs_fastest_repeat"):
        lines.append(f"  vs the fastest measured repeat: {_verdict(fastest)}")
    lines.append("machine steady: " + ("yes" if section["machine_steady"] else
                                       "no (" + "; ".join(section["unsteady"]) + ")"))
    return lines
