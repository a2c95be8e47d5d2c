"""Whether a fidelity run meets the project's targets, and whether the machine held still
long enough for the answer to mean anything.

Targets (for the CPU ``small`` model): every arm's ITL p50 and
TTFT p50 within 10% of measured, ITL p99 within 15%. The machine counts as steady when each
measured run's decode steps stayed within ``MAX_DRIFT_RANGE`` of their own level (the
``drift`` section), the reference probes after the runs read within ``MAX_PROBE_SHIFT`` of
the probes before them, and within ``MAX_CALIBRATION_SHIFT`` of the profile's own probe
times: on a shared machine a miss outside those bounds says more about the neighbours than
about the model.
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

LIMITS: dict[str, float] = {"itl_p50_ms": 0.10, "ttft_p50_ms": 0.10, "itl_p99_ms": 0.15}
MAX_DRIFT_RANGE = 1.15
MAX_PROBE_SHIFT = 0.15
MAX_CALIBRATION_SHIFT = 0.10  # probes now vs at calibration (the profile's own speed)


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
    unsteady = [
        f"{r['arm']} r{r['repeat']}: decode steps ran x{min(tenths):.2f}.."
        f"x{max(tenths):.2f} their prediction"
        for r in drift["runs"] if (tenths := r["ratio_by_tenth"]) is not None
        and r["range"] is not None and r["range"] > MAX_DRIFT_RANGE
    ]
    before, after = machine.get("probe_s_before") or {}, machine.get("probe_s_after") or {}
    unsteady += [
        f"probe {k} read {after[k] / before[k]:.2f}x after the runs what it read before"
        for k in sorted(before) if k in after and before[k] > 0
        and abs(after[k] / before[k] - 1.0) > MAX_PROBE_SHIFT
    ]
    slow = machine.get("slowdown_vs_calibration") or {}
    unsteady += [
        f"probe {k} ran {v:.2f}x its calibration time" for k, v in sorted(slow.items())
        if abs(v - 1.0) > MAX_CALIBRATION_SHIFT
    ]
    return {
        "limits": LIMITS,
        "arms": per_arm,
        "all_met": _all(per_arm),
        "arms_vs_fastest_repeat": fastest,
        "all_met_vs_fastest_repeat": None if fastest is None else _all(fastest),
        "machine_steady": not unsteady,
        "unsteady": unsteady,
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
