"""Fidelity of exit depths, per arm at the reference point: the exit-depth distribution of
the decode tokens (the first output token of a request, which always runs all D loops, left
out), measured and simulated, their total-variation distance against ``EXIT_TV_LIMIT``, mean
loops per token, core calls per output token, and how requests differ (``request_loops``:
the spread of each request's mean loops).

A request's tokens exit alike (its prompt sets its gates' trajectory), so a measured
distribution is a sample of requests, not of tokens. ``request_noise`` says how far that
sample alone moves: the TV between the measured distribution and the distribution of its
requests resampled with replacement (a bootstrap). A simulation from prompts it has not seen
cannot be expected to land closer than that; one that replays the workload's own rows
(``sim.exit_regime``) lands at 0.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from loopserve.fidelity.json_types import (
    ExitArm,
    ExitsSection,
    ExitWorld,
    RequestLoops,
    RequestNoise,
)
from loopserve.fidelity.world import WorldRun
from loopserve.plan import Plan
from sim.exit_profile import depth_histogram, tv_distance

EXIT_TV_LIMIT = 0.05  # the target for the simulated exit-depth distribution
NOISE_DRAWS = 400


def _depths(runs: list[WorldRun]) -> list[tuple[tuple[int, str], int]]:
    """(run, request) and exit depth of every decode token of ``runs``."""
    return [((k, t.request_id), t.exit_depth) for k, r in enumerate(runs)
            for t in r.records.tokens if t.index > 0]


def _world(runs: list[WorldRun], num_depths: int) -> ExitWorld:
    depths = [d for _, d in _depths(runs)]
    outputs = sum(len(r.records.tokens) for r in runs)
    calls = sum(s.core_calls for r in runs for s in r.records.steps)
    return {
        "depth_fractions": [round(f, 6) for f in depth_histogram(depths, num_depths)],
        "mean_loops": round(sum(depths) / len(depths), 6) if depths else None,
        "core_calls_per_output_token": round(calls / outputs, 6) if outputs else None,
        "num_tokens": len(depths),
        "request_loops": request_loops(runs, num_depths),
    }


def request_loops(runs: list[WorldRun], num_depths: int) -> RequestLoops:
    """How the runs' requests differ: the p10 / p50 / p90 and standard deviation of each
    (run, request)'s mean loops per decode token. Real requests exit alike within and unlike
    between them; a simulation drawing every token from any profile row shrinks the spread."""
    per = _per_request(runs, num_depths)
    per = per[per.sum(axis=1) > 0]
    if len(per) == 0:
        return {"num_requests": 0, "p10": None, "p50": None, "p90": None, "sd": None}
    means = per @ np.arange(1, num_depths + 1) / per.sum(axis=1)
    p10, p50, p90 = (round(float(v), 4) for v in np.percentile(means, [10, 50, 90]))
    return {"num_requests": len(means), "p10": p10, "p50": p50, "p90": p90,
            "sd": round(float(means.std()), 4)}


def _per_request(runs: list[WorldRun], num_depths: int) -> np.ndarray:
    """Exit-depth counts per (run, request): one row each, D columns."""
    counts: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0] * num_depths)
    for key, d in _depths(runs):
        counts[key][d - 1] += 1
    return np.array(list(counts.values()), dtype=np.float64).reshape(-1, num_depths)


def _resampled(per_request: np.ndarray, rng: np.random.Generator, draws: int) -> np.ndarray:
    """``draws`` bootstrap resamples of the requests: each one's depth fractions."""
    n = len(per_request)
    weights = np.stack([np.bincount(p, minlength=n) for p in rng.integers(0, n, (draws, n))])
    resampled = weights @ per_request
    return resampled / resampled.sum(axis=1, keepdims=True)


def _summary(n: int, tvs: np.ndarray | None) -> RequestNoise:
    if tvs is None:
        return {"num_requests": n, "tv_p50": None, "tv_p95": None}
    p50, p95 = np.percentile(tvs, [50, 95])
    return {"num_requests": n, "tv_p50": round(float(p50), 6), "tv_p95": round(float(p95), 6)}


def request_noise(runs: list[WorldRun], num_depths: int, draws: int = NOISE_DRAWS,
                  seed: int = 0, two_sample: bool = False) -> RequestNoise:
    """TV between the runs' exit-depth distribution and ``draws`` bootstrap resamples of
    their requests (each request's tokens kept together); median and 95th percentile.
    ``two_sample``: the TV between two independent resamples instead, what two unbiased
    samples of this many requests differ by (the reference for a profile of other prompts
    of the same size). Seeded, so the same runs give the same numbers."""
    per_request = _per_request(runs, num_depths)
    n = len(per_request)
    if n == 0 or per_request.sum() == 0:
        return _summary(n, None)
    rng = np.random.default_rng(seed)
    first = _resampled(per_request, rng, draws)
    other = (_resampled(per_request, rng, draws) if two_sample
             else per_request.sum(axis=0) / per_request.sum())
    return _summary(n, 0.5 * np.abs(first - other).sum(axis=1))


def exit_fidelity(plan: Plan, sim: list[WorldRun], real: list[WorldRun]) -> ExitsSection:
    """The ``exits`` section of fidelity.json."""
    d = plan.shape.num_depths
    ref = plan.reference_point_id
    arms: dict[str, ExitArm] = {}
    for arm in plan.scenario.arms:
        s_runs = [r for r in sim if r.spec.arm == arm and r.spec.point_id == ref]
        m_runs = [r for r in real if r.spec.arm == arm and r.spec.point_id == ref]
        s, m = _world(s_runs, d), _world(m_runs, d)
        tv = round(tv_distance(s["depth_fractions"], m["depth_fractions"]), 6)
        arms[arm] = {"sim": s, "measured": m, "tv_distance": tv,
                     "met": tv <= EXIT_TV_LIMIT, "request_noise": request_noise(m_runs, d)}
    src = plan.point(ref).exits
    return {"exit_model": src.describe() if src is not None else {"kind": "core"},
            "tv_limit": EXIT_TV_LIMIT, "arms": arms}


def _fmt(w: ExitWorld) -> str:
    fr = "/".join(f"{100 * f:.1f}" for f in w["depth_fractions"])
    ml, cc, rq = w["mean_loops"], w["core_calls_per_output_token"], w["request_loops"]
    per = ("" if rq["p10"] is None else
           f" per request p10/p50/p90 {rq['p10']:.2f}/{rq['p50']:.2f}/{rq['p90']:.2f}")
    return (f"{fr}% mean {ml if ml is None else f'{ml:.2f}'} calls/tok "
            f"{cc if cc is None else f'{cc:.2f}'}{per}")


def exit_lines(section: ExitsSection) -> list[str]:
    """The CLI table's exit-depth lines."""
    model = section["exit_model"]
    rows = f", {model['rows']}" if model.get("rows") else ""
    lines = [f"exit depths (exit model: {model.get('kind')}{rows}; TV target "
             f"<= {section['tv_limit']:.2f}; noise: TV of the measured requests resampled, "
             "p50/p95):"]
    for arm, a in section["arms"].items():
        noise = a["request_noise"]
        p50, p95 = noise["tv_p50"], noise["tv_p95"]
        spread = "n/a" if p50 is None or p95 is None else f"{p50:.3f}/{p95:.3f}"
        lines.append(f"  {arm:<10} sim {_fmt(a['sim'])} | measured {_fmt(a['measured'])} | "
                     f"TV {a['tv_distance']:.3f} {'met' if a['met'] else 'MISSED'} | noise "
                     f"{spread} over {noise['num_requests']} requests")
    return lines
