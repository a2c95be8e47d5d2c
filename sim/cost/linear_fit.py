"""A calibrated stage's linear model in the form the simulator evaluates once per step
(``LinearFit``), and the piecewise-linear interpolation its grid terms use (``pwl_value``);
``sim.cost.profile.StageFit`` is the file's form of the same model."""

from __future__ import annotations

from sim.cost.features import FEATURE_INDEX


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
    order (``sum`` of the terms, then of the grid terms), with the features found by index.
    Built from a ``StageFit``'s fields: its ``features`` and ``coef``, ``intercept_s``, and
    per grid term ``(feature, points, values_s)``."""

    def __init__(self, features: list[str], coef: list[float], intercept_s: float,
                 grids: list[tuple[str, list[float], list[float]]]) -> None:
        self.intercept_s = intercept_s
        self.terms = [(FEATURE_INDEX[n], c) for n, c in zip(features, coef, strict=True)]
        self.grids = [(FEATURE_INDEX[feature], points, values)
                      for feature, points, values in grids]

    def predict(self, v: list[float]) -> float:
        """Seconds for feature values ``v`` (clamped at 0)."""
        t = self.intercept_s + sum([c * v[i] for i, c in self.terms])
        t += sum([pwl_value(points, values, v[i]) for i, points, values in self.grids])
        return max(0.0, t)
