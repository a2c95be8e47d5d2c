"""Sweep points: ``variants`` (named override sets) x the ``sweep`` grid, in a stable order,
and the seeds of each point's repeats.

Point ids run variant-major, then over the cartesian product of the sweep lists in the order
the sweep keys are written (the last key varies fastest). Each point is the scenario with its
values applied and validated again, so a bad value names its field and point.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from engine.core.exits import stable_seed
from loopserve.errors import UserError
from loopserve.schema.load import set_path, validate
from loopserve.schema.scenario import Scalar, Scenario

VARIANT_KEY = "variant"


class PointRow(TypedDict):
    """A point as summary.json lists it."""

    point_id: int
    values: dict[str, Scalar]


@dataclass(frozen=True)
class SweepPoint:
    """One point: its id, the values that define it, and the resolved scenario."""

    point_id: int
    values: dict[str, Scalar]
    scenario: Scenario

    @property
    def row(self) -> PointRow:
        return {"point_id": self.point_id, "values": self.values}

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items()) or "base"


def repeat_seed(seed: int, repeat: int) -> int:
    """The seed of repeat ``repeat``: the scenario's own seed for repeat 0 (so a one-repeat
    run is that seed's run), else a hash of (seed, repeat), so no two (seed, repeat) pairs
    share draws (``seed + repeat`` would make seed 0's repeat 1 seed 1's repeat 0)."""
    return seed if repeat == 0 else stable_seed(seed, "repeat", repeat) >> 1


def grid_values(scn: Scenario) -> list[dict[str, Scalar]]:
    """The ordered list of point values (without resolving scenarios)."""
    names: list[str | None] = list(scn.variants) if scn.variants else [None]
    sweep = scn.sweep or {}
    keys = list(sweep)
    out = []
    for name in names:
        for combo in itertools.product(*(sweep[k] for k in keys)):
            values: dict[str, Scalar] = {} if name is None else {VARIANT_KEY: name}
            values.update(dict(zip(keys, combo, strict=True)))
            out.append(values)
    return out


def expand(scn: Scenario) -> list[SweepPoint]:
    """Every point of the scenario, each validated; a scenario without sweep has one point."""
    base = scn.model_dump(exclude_unset=True)
    base.pop("sweep", None)
    base.pop("variants", None)
    points = []
    for point_id, values in enumerate(grid_values(scn)):
        data = copy.deepcopy(base)
        applied = dict(values)
        name = applied.pop(VARIANT_KEY, None)
        if name is not None:
            assert scn.variants is not None
            for key, value in scn.variants[str(name)].items():
                set_path(data, key, value)
        for key, value in applied.items():
            set_path(data, key, value)
        try:
            resolved = validate(data).located(scn.base_dir)
        except UserError as err:
            label = ", ".join(f"{k}={v}" for k, v in values.items())
            raise UserError(err.field, f"{err.message} (sweep point {point_id}: {label})") from None
        points.append(SweepPoint(point_id, values, resolved))
    return points


def reference_point(scenario: Mapping[str, Any], points: Sequence[PointRow]) -> int:
    """The point whose values match the scenario's own (unswept) values, else the first.

    ``scenario`` is the scenario as a mapping (``Scenario.model_dump()`` or a resolved
    scenario.yaml), ``points`` the ``{point_id, values}`` entries of summary.json. With
    variants, the first variant's points are searched. Single-run plots (timeline, CDF),
    trace.json and the CLI table use this point.
    """
    variants = scenario.get("variants") or {}
    first_variant = next(iter(variants), None)
    for p in points:
        values = p["values"]
        if values.get(VARIANT_KEY, first_variant) != first_variant:
            continue
        if all(_get(scenario, k) == v for k, v in values.items() if k != VARIANT_KEY):
            return int(p["point_id"])
    return int(points[0]["point_id"])


def _get(data: object, dotted: str) -> object:
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node

