"""Fit the calibrated cost model from measured steps (pure numpy, no torch).

Per stage kind, every subset of that kind's candidate features (optionally with one
piecewise-linear ``grid`` term in place of a linear feature, and for decode calls a second one
in the decode rows, ``rows_grid``) is fitted by least squares on
relative error (rows weighted by 1 / measured time, so a 0.1 ms PRELUDE counts as much as a
300 ms PREFILL). The intercept is the per-call host overhead. Candidates with a negative
coefficient are dropped (time never falls as work grows). The model is chosen by K-fold
cross-validated MAPE on the fitting shapes, preferring fewer parameters within a small
tolerance of the best; the held-out shapes are scored only after the choice, so the reported
held-out error is honest.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from sim.cost.profile import GridTerm, StageFit

CANDIDATES: dict[str, tuple[str, ...]] = {
    "decode": ("decode_rows", "decode_padded_context", "context_sum", "context_max",
               "finalize_copies"),
    "prompt": ("prompt_tokens", "prompt_seqs", "prompt_context", "prompt_kv_tokens",
               "fused_prelude_rows"),
    "mixed": ("decode_rows", "decode_padded_context", "prompt_tokens", "prompt_seqs",
              "prompt_context", "prompt_kv_tokens", "fused_prelude_rows"),
    "prefill": ("core_calls", "prompt_tokens", "prompt_seqs", "prompt_context",
                "prompt_kv_tokens"),
    "prelude": ("rows",),
    "coda": ("rows",),
    "step_gap": ("items", "rows", "core_calls", "decode_rows", "prompt_seqs"),
}
CANDIDATES["decode_after_prompt"] = CANDIDATES["decode"]  # the same call, colder caches
# The adaptive-exit extras (paired differences, not whole steps; see sim.cost.profile).
CANDIDATES["signals"] = ("signal_rows",)
CANDIDATES["finalize"] = ("finalize_copies",)
# prompt_tokens: on a CPU a small chunk costs more per token than the big chunks' slope
# says, so the grid's prompt kinds fit a per-token term of their own.
GRID_CANDIDATES: dict[str, tuple[str, ...]] = {
    "decode": ("decode_padded_context",),
    "mixed": ("decode_padded_context", "prompt_context", "prompt_tokens"),
    "prompt": ("prompt_context", "prompt_tokens"),
    "prefill": ("prompt_context", "prompt_tokens"),
    "prelude": ("rows",),
    "coda": ("rows",),
}
GRID_CANDIDATES["decode_after_prompt"] = GRID_CANDIDATES["decode"]
# Kinds that may add a second grid in the decode rows (``StageFit.rows_grid``).
ROWS_GRID_KINDS = frozenset({"decode", "decode_after_prompt", "mixed"})
# Knot counts tried for a grid term (CV picks; duplicates on small grids are skipped).
_KNOT_COUNTS = (4, 6, 10)
# Prefer a simpler model when its CV error is within this of the best (relative, absolute).
_TOLERANCE = (1.03, 0.002)


def contended(wall_s: float, cpu_s: float) -> bool:
    """Whether a one-thread step's wall time exceeds its thread CPU time by more than 15% +
    0.2 ms: the OS ran something else meanwhile (on a shared machine, the neighbours)."""
    return wall_s > cpu_s * 1.15 + 2e-4


@dataclass(frozen=True, slots=True)
class Sample:
    """One measured step: its stage kind, features, time (median seconds), and whether it is
    kept apart from fitting."""

    kind: str
    features: dict[str, float]
    seconds: float
    held_out: bool = False
    label: str = ""


@dataclass
class StageResult:
    """The chosen model of one stage kind and its errors (fractions, not percent)."""

    kind: str
    fit: StageFit
    cv_mape: float
    num_fit: int
    num_held_out: int
    held_out_mape: float | None
    held_out_max_error: float | None
    residuals: list[tuple[str, float, float, bool]] = field(default_factory=list)
    """(label, measured_s, predicted_s, held_out) for every sample of the kind."""


@dataclass(frozen=True)
class _Spec:
    features: tuple[str, ...]
    grid: str | None
    knots: tuple[float, ...] = ()
    row_knots: tuple[float, ...] = ()  # a decode_rows grid beside ``grid``

    @property
    def num_params(self) -> int:
        return (1 + len(self.features) + max(0, len(self.knots) - 1)
                + max(0, len(self.row_knots) - 1))


def _knots(values: np.ndarray, max_knots: int = 6) -> tuple[float, ...]:
    """Up to ``max_knots`` of the distinct values seen, evenly spaced in rank (the grid is
    geometric, so this is roughly log-spaced), always the smallest and the largest."""
    distinct = np.unique(values)
    if distinct.size < 3:
        return ()
    picks = np.unique(np.round(np.linspace(0, distinct.size - 1, min(max_knots, distinct.size))))
    return tuple(float(distinct[int(i)]) for i in picks)


def _pwl_basis(knots: Sequence[float], x: np.ndarray) -> np.ndarray:
    """Columns k = 1..m-1: the piecewise-linear function with value 1 at knot k and 0 at the
    other knots (extended linearly past both ends), so g(x) = basis @ values has g = 0 at the
    first knot and the intercept stays identifiable."""
    pts = np.asarray(knots, dtype=np.float64)
    m = len(pts) - 1
    seg = np.clip(np.searchsorted(pts, x, side="left"), 1, m)
    x0, x1 = pts[seg - 1], pts[seg]
    w = (x - x0) / (x1 - x0)
    cols = np.zeros((x.size, m))
    rows = np.arange(x.size)
    for j, weight in ((seg - 1, 1.0 - w), (seg, w)):
        keep = j >= 1
        cols[rows[keep], j[keep] - 1] += weight[keep]
    return cols


def _design(spec: _Spec, feats: dict[str, np.ndarray], n: int) -> np.ndarray:
    cols = [np.ones(n)] + [feats[f] for f in spec.features]
    X = np.column_stack(cols)
    if spec.grid is not None:
        X = np.hstack([X, _pwl_basis(spec.knots, feats[spec.grid])])
    if spec.row_knots:
        X = np.hstack([X, _pwl_basis(spec.row_knots, feats["decode_rows"])])
    return X


def _solve(X: np.ndarray, y: np.ndarray, *, full_rank: bool = True,
           relative: bool = True) -> np.ndarray | None:
    """Relative-error least squares; None if any parameter is negative, or if the system is
    rank-deficient and ``full_rank`` (a CV fold may miss a grid segment: it then gets the
    minimum-norm solution)."""
    w = 1.0 / y if relative else np.ones_like(y)
    beta, _, rank, _ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    if full_rank and rank < X.shape[1]:
        return None
    if np.any(beta < -1e-12 * max(1.0, float(np.abs(beta).max()))):
        return None
    return np.asarray(beta)


def _mape(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - y) / y))


def _cv_mape(spec: _Spec, feats: dict[str, np.ndarray], y: np.ndarray, folds: int,
             relative: bool = True) -> float:
    """K-fold error: MAPE, or (``relative`` False) total absolute error / total time."""
    n = y.size
    X = _design(spec, feats, n)
    if n < X.shape[1] + 1:
        return float("inf")
    idx = np.arange(n)
    errs = np.empty(n)
    for k in range(folds):
        test = idx % folds == k
        beta = _solve(X[~test], y[~test], full_rank=False, relative=relative)
        if beta is None:
            return float("inf")
        errs[test] = np.abs(X[test] @ beta - y[test])
    return float(np.mean(errs / y)) if relative else float(errs.sum() / y.sum())


def _specs(kind: str, feats: dict[str, np.ndarray]) -> list[_Spec]:
    usable = [f for f in CANDIDATES[kind] if np.ptp(feats[f]) > 0]
    out: list[_Spec] = []
    for r in range(len(usable) + 1):
        for combo in itertools.combinations(usable, r):
            out.append(_Spec(combo, None))
            for g in GRID_CANDIDATES.get(kind, ()):
                if g in combo:
                    continue
                for knots in dict.fromkeys(_knots(feats[g], n) for n in _KNOT_COUNTS):
                    if knots:
                        out.append(_Spec(combo, g, knots))
    if kind in ROWS_GRID_KINDS and "decode_rows" in feats:
        row_knots = _knots(feats["decode_rows"], max(_KNOT_COUNTS))
        if row_knots:
            out += [_Spec(sp.features, sp.grid, sp.knots, row_knots) for sp in list(out)
                    if "decode_rows" not in sp.features and sp.grid != "decode_rows"]
    return out


def _stage_fit(spec: _Spec, beta: np.ndarray) -> StageFit:
    k = len(spec.features)
    g = 1 + k + max(0, len(spec.knots) - 1)  # where the rows grid's values start
    grid = rows_grid = None
    if spec.grid is not None:
        grid = GridTerm(feature=spec.grid, points=list(spec.knots),
                        values_s=[0.0, *(float(v) for v in beta[1 + k:g])])
    if spec.row_knots:
        rows_grid = GridTerm(feature="decode_rows", points=list(spec.row_knots),
                             values_s=[0.0, *(float(v) for v in beta[g:])])
    return StageFit(features=list(spec.features), coef=[float(c) for c in beta[1:1 + k]],
                    intercept_s=float(beta[0]), grid=grid, rows_grid=rows_grid)


def fit_stage(kind: str, samples: Sequence[Sample], *, folds: int = 5,
              relative: bool = True) -> StageResult | None:
    """The chosen model for ``kind`` from its fitting samples, scored on its held-out ones;
    None when there are no fitting samples. ``relative`` False fits plain least squares (the
    conditional mean: right for host gaps, whose sum is what a timeline feels)."""
    fit_s = [s for s in samples if s.kind == kind and not s.held_out]
    held = [s for s in samples if s.kind == kind and s.held_out]
    if not fit_s:
        return None
    y = np.array([s.seconds for s in fit_s], dtype=np.float64)
    if np.any(y <= 0):
        raise ValueError(f"{kind}: measured step times must be > 0")
    names = CANDIDATES[kind]
    feats = {f: np.array([s.features[f] for s in fit_s], dtype=np.float64) for f in names}
    folds = max(2, min(folds, y.size))
    finite: list[tuple[float, _Spec, np.ndarray]] = []
    for sp in _specs(kind, feats):
        e = _cv_mape(sp, feats, y, folds, relative)
        if np.isfinite(e) and (beta := _solve(_design(sp, feats, y.size), y,
                                              relative=relative)) is not None:
            finite.append((e, sp, beta))
    if not finite:  # one fitting sample (no fold to score on): its own time
        finite = [(0.0, _Spec((), None), np.array([float(np.median(y))]))]
    best = min(e for e, _, _ in finite)
    ok = [(sp.num_params, e, sp, beta) for e, sp, beta in finite
          if e <= best * _TOLERANCE[0] + _TOLERANCE[1]]
    _, cv, spec, beta = min(ok, key=lambda t: (t[0], t[1]))
    fit = _stage_fit(spec, beta)
    result = StageResult(kind, fit, cv, len(fit_s), len(held), None, None)
    for s in [*fit_s, *held]:
        result.residuals.append((s.label, s.seconds, fit.predict(s.features), s.held_out))
    if held:
        errs = [abs(p - m) / m for _, m, p, h in result.residuals if h]
        result.held_out_mape = float(np.mean(errs))
        result.held_out_max_error = float(np.max(errs))
    return result


def fit_profile_stages(samples: Sequence[Sample], kinds: Sequence[str]) -> dict[str, StageResult]:
    """``fit_stage`` for each kind that has fitting samples."""
    out: dict[str, StageResult] = {}
    for kind in kinds:
        res = fit_stage(kind, samples)
        if res is not None:
            out[kind] = res
    return out


def pooled_held_out(results: dict[str, StageResult]) -> tuple[float | None, float | None]:
    """(MAPE, max relative error) over every held-out sample of every stage."""
    errs = [abs(p - m) / m for r in results.values() for _, m, p, h in r.residuals if h]
    if not errs:
        return None, None
    return float(np.mean(errs)), float(np.max(errs))
