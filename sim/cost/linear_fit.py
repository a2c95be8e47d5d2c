"""A calibrated stage's linear model in the form the simulator evaluates once per step
(``LinearFit``), and the piecewise-linear interpolation its grid terms use (``pwl_value``);
``sim.cost.profile.StageFit`` is the file's form of the same model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.cost.features import FEATURE_INDEX

if TYPE_CHECKING:
    from sim.cost.profile import StageFit


def pwl_value(points: list[float], values: list[float], x: float) -> float:
    """Piecewise-linear interpolation through (points, values), extended linearly past both
    ends with the end segments' slopes."""
    i = 1
    last = len(points) - 1
    while i < last and x > points[i]:
        i += 1
    x0, x1 = points[i - 1], points[i]
    y0, y1 = values[i - 1], values[i]
    return y0 + (x - x0) * (y1 - y0) / (x1 - x0)


class LinearFit:
    """``StageFit.predict`` over ``feature_values``' list: the same operations in the same
    order (``sum`` of the terms, then of the grid terms), with the features found by index."""

    def __init__(self, fit: StageFit) -> None:
        self.intercept_s: float = fit.intercept_s
        self.terms: list[tuple[int, float]] = [
            (FEATURE_INDEX[n], c) for n, c in zip(fit.features, fit.coef, strict=True)]
        self.grids: list[tuple[int, list[float], list[float]]] = [
            (FEATURE_INDEX[g.feature], g.points, g.values_s) for g in fit.grids]

    def predict(self, v: list[float]) -> float:
        """Seconds for feature values ``v`` (clamped at 0)."""
        t = self.intercept_s + sum([c * v[i] for i, c in self.terms])
        t += sum([pwl_value(points, values, v[i]) for i, points, values in self.grids])
        return max(0.0, t)
