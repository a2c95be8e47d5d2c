"""The fidelity verdict: targets per arm and whether the machine held still."""

from __future__ import annotations

from typing import Any

from loopserve.fidelity.targets import target_lines, targets


def _arms(**errors: tuple[float, float, float]) -> dict[str, Any]:
    names = ("itl_p50_ms", "ttft_p50_ms", "itl_p99_ms")
    return {arm: {n: {"sim": 1.0, "measured": 1.0, "rel_error": e}
                  for n, e in zip(names, errs, strict=True)}
            for arm, errs in errors.items()}


def _drift(*ranges: tuple[float, float]) -> dict[str, Any]:
    return {"runs": [{"arm": f"a{i}", "repeat": 0, "ratio_by_tenth": [lo, hi],
                      "range": hi / lo} for i, (lo, hi) in enumerate(ranges)]}


STEADY_PROBES = {"probe_s_before": {"decode": 0.010}, "probe_s_after": {"decode": 0.011}}


def test_limits_are_ten_percent_for_p50s_and_fifteen_for_itl_p99() -> None:
    arms = _arms(mixed=(-0.099, 0.0999, -0.149), atomic=(0.0, 0.0, 0.151),
                 per_depth=(0.101, 0.0, 0.0))
    t = targets(arms, _drift((1.0, 1.1)), STEADY_PROBES)
    assert t["arms"]["mixed"] == {"itl_p50_ms": True, "ttft_p50_ms": True, "itl_p99_ms": True}
    assert t["arms"]["atomic"]["itl_p99_ms"] is False
    assert t["arms"]["per_depth"]["itl_p50_ms"] is False
    assert t["all_met"] is False and t["machine_steady"] is True and t["unsteady"] == []
    assert t["arms_vs_fastest_repeat"] is None and t["all_met_vs_fastest_repeat"] is None
    lines = target_lines(t)
    assert lines[0].endswith("vs the median measured run: met in mixed; missed in atomic, "
                             "per_depth")
    assert lines[1] == "machine steady: yes"


def test_with_repeats_the_fastest_repeat_is_checked_too() -> None:
    arms = _arms(mixed=(-0.16, 0.0, -0.11))
    fastest = _arms(mixed=(-0.05, 0.02, -0.08))
    t = targets(arms, _drift((1.0, 1.1)), STEADY_PROBES, fastest)
    assert t["all_met"] is False and t["all_met_vs_fastest_repeat"] is True
    lines = target_lines(t)
    assert lines[0].endswith("missed in mixed") and lines[1].endswith("met in mixed")


def test_a_drifting_run_or_a_shifted_probe_marks_the_machine_unsteady() -> None:
    arms = _arms(mixed=(0.0, 0.0, 0.0))
    t = targets(arms, _drift((1.0, 1.1), (1.09, 1.85)), STEADY_PROBES)
    assert t["all_met"] is True and t["machine_steady"] is False
    assert t["unsteady"] == ["a1 r0: decode steps ran x1.09..x1.85 their prediction"]
    shifted = {"probe_s_before": {"decode": 0.010}, "probe_s_after": {"decode": 0.0145}}
    t = targets(arms, _drift((1.0, 1.1)), shifted)
    assert t["unsteady"] == ["probe decode read 1.45x after the runs what it read before"]
    assert target_lines(t)[-1].startswith("machine steady: no (probe decode read 1.45x")


def test_a_machine_slower_than_at_calibration_is_not_steady() -> None:
    arms = _arms(mixed=(0.0, 0.0, 0.0))
    slower = {**STEADY_PROBES, "slowdown_vs_calibration": {"decode": 1.23, "prompt": 1.06}}
    t = targets(arms, _drift((1.0, 1.1)), slower)
    assert t["unsteady"] == ["probe decode ran 1.23x its calibration time"]
    same = {**STEADY_PROBES, "slowdown_vs_calibration": {"decode": 0.95, "prompt": 1.06}}
    assert targets(arms, _drift((1.0, 1.1)), same)["machine_steady"] is True


def test_a_missing_metric_is_not_counted_as_met() -> None:
    arms = _arms(mixed=(0.0, 0.0, 0.0))
    arms["mixed"]["itl_p99_ms"]["rel_error"] = None
    t = targets(arms, _drift(), STEADY_PROBES)
    assert t["arms"]["mixed"]["itl_p99_ms"] is None and t["all_met"] is False
