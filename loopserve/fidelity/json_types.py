"""The fidelity.json document as types: one TypedDict per section, keys in file order. The
section builders (``compare``, ``batches``, ``machine``, ``tail``, ``targets``) return these,
the report and the printed table read them, and ``loopserve.commands.fidelity`` writes the
document as JSON."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class MetricError(TypedDict):
    """One metric of one arm: the simulated and measured values and (sim - meas) / meas."""

    sim: float | None
    measured: float | None
    rel_error: float | None


ArmErrors = dict[str, MetricError]  # metric name (itl_p50_ms, ...) -> its errors
# ArmErrors plus "repeat": the measured repeat compared (vs_fastest_repeat)
FastestErrors = dict[str, MetricError | int]


class ErrorStats(TypedDict):
    """Relative errors of predicted against measured times (None without a sample)."""

    count: int
    mape: float | None
    max_error: float | None
    median_error: float | None
    predicted_s: float
    measured_s: float


class StepErrors(TypedDict):
    all: ErrorStats
    by_kind: dict[str, ErrorStats]
    by_stage: dict[str, ErrorStats]
    vs_cpu_time: ErrorStats


class Makespan(TypedDict):
    sim_s: float | None
    measured_s: float | None


class Machine(TypedDict):
    """The reference probes: at calibration, before and after the measured runs."""

    probe_s_calibration: dict[str, float] | None
    probe_s_before: dict[str, float]
    probe_s_after: dict[str, float]
    slowdown_vs_calibration: dict[str, float] | None


class DriftRun(TypedDict):
    arm: str
    point_id: int
    repeat: int
    num_steps: int
    ratio_by_tenth: list[float] | None
    range: float | None


class DriftSection(TypedDict):
    kind: str
    measure: str
    runs: list[DriftRun]


class TailKind(TypedDict):
    """One step kind's share of a tail interval (per interval)."""

    steps: float
    measured_ms: float
    predicted_ms: float
    tail_ratio: float | None
    run_ratio: float | None


class TailRun(TypedDict):
    arm: str
    point_id: int
    repeat: int
    num_intervals: int
    num_tail: int
    threshold_ms: float
    around_ms: list[float]
    on_edge: bool
    measured_ms: float
    predicted_ms: float
    gap_measured_ms: float
    gap_predicted_ms: float
    by_kind: dict[str, TailKind]
    largest_excess_kind: str | None
    bursts: bool | None


class TailSection(TypedDict):
    percentile: float
    burst_ratio: float
    edge: float
    measure: str
    runs: list[TailRun]


class BatchRun(TypedDict):
    arm: str
    point_id: int
    repeat: int
    same: bool
    num_sim: int
    num_measured: int
    first_divergence: int | None
    sim_batch: NotRequired[str | None]  # only where the sequences diverge
    measured_batch: NotRequired[str | None]


class BatchesSection(TypedDict):
    timing_dependent_schedule: bool
    runs: list[BatchRun]


Verdicts = dict[str, dict[str, bool | None]]  # arm -> metric -> within its limit (None: no data)


class TargetsSection(TypedDict):
    limits: dict[str, float]
    arms: Verdicts
    all_met: bool
    arms_vs_fastest_repeat: Verdicts | None
    all_met_vs_fastest_repeat: bool | None
    machine_steady: bool
    unsteady: list[str]


class ProfileInfo(TypedDict):
    hardware: str
    model: str
    held_out_mape: float | None
    date: str
    device: str
    num_threads: int | None


class Allocator(TypedDict):
    measured: str | None
    calibration: str | None


class RequestLoops(TypedDict):
    """How requests differ: each request's mean loops per decode token, over the requests."""

    num_requests: int
    p10: float | None
    p50: float | None
    p90: float | None
    sd: float | None


class ExitWorld(TypedDict):
    """Exit depths of one world's runs of an arm (see ``loopserve.fidelity.exits``)."""


    depth_fractions: list[float]  # tokens exiting after 1..D loops
    mean_loops: float | None
    core_calls_per_output_token: float | None
    num_tokens: int
    request_loops: RequestLoops


class RequestNoise(TypedDict):
    """How far resampling the measured requests alone moves their exit distribution (TV)."""

    num_requests: int
    tv_p50: float | None
    tv_p95: float | None


class ExitArm(TypedDict):
    sim: ExitWorld
    measured: ExitWorld
    tv_distance: float
    met: bool  # tv_distance within the section's tv_limit
    request_noise: RequestNoise


class ExitsSection(TypedDict):
    exit_model: dict[str, object]
    tv_limit: float
    arms: dict[str, ExitArm]


class AtRunSpeed(TypedDict):
    """The simulation again with the profile scaled to the measured runs' step time
    (``loopserve.fidelity.machine``): a diagnostic, not a prediction."""

    step_time_ratio: float | None
    arms: dict[str, ArmErrors] | None


class FidelityDoc(TypedDict):
    """The whole fidelity.json document."""

    step_mape: float | None
    step_max_error: float | None
    arms: dict[str, ArmErrors]
    exits: ExitsSection
    vs_fastest_repeat: dict[str, FastestErrors] | None
    at_run_speed: AtRunSpeed | None
    targets: TargetsSection
    measured_repeat_spread: dict[str, dict[str, float | None]] | None
    same_batches: bool
    step_errors: StepErrors
    host_gap: ErrorStats
    contended_step_fraction: float | None
    makespan: Makespan
    machine: Machine
    drift: DriftSection
    tail: TailSection
    batches: BatchesSection
    profile: ProfileInfo
    target: str
    scenario: str
    reference_point_id: int
    allocator: Allocator
