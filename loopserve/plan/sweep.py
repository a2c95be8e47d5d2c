"""Sweep points: ``variants`` (named override sets) x the ``sweep`` grid, in a stable order,
and the seeds of each point's repeats.

Point ids run variant-major, then over the cartesian product of the sweep lists in the order
the sweep keys are written (the last key varies fastest). Each point is the scenario with its
values applied and validated again, so a bad value names its field and point. Planning
(``loopserve.plan``) completes each point with what its runs need: each arm's engine
config and, on the simulator, its cost model and exit model.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from engine.core.exits import stable_seed
from loopserve.errors import UserError
from loopserve.schema.load import set_path, validate
from loopserve.schema.scenario import Scalar, Scenario

if TYPE_CHECKING:
    from engine.core.config import EngineConfig
    from loopserve.plan.exit_source import ExitSource
    from sim.cost.base import CostModel
    from sim.exit_model import ExitDraw
    from sim.exit_profile import ExitProfile

VARIANT_KEY = "variant"


class PointRow(TypedDict):
    """A point as summary.json lists it."""

    point_id: int
    values: dict[str, Scalar]


@dataclass(frozen=True)
class SweepPoint:
    """One point: its id, the values that define it and the resolved scenario; once planned,
    also each arm's engine config, its longest request lifetime, what differs between its
    arms, the cost model that prices it and its record, and its exit model."""

    point_id: int
    values: dict[str, Scalar]
    scenario: Scenario
    configs: dict[str, EngineConfig] = field(default_factory=dict)  # arm -> its engine config
    lifetime: int = 0  # the longest request lifetime of its workload, in positions
    unequal_arms: list[str] = field(default_factory=list)  # allow_unequal_arms only
    # the cost model that ran (sim.cost.resolve.describe_cost; kind "measured" on a real
    # target), recorded in summary.json and env.json
    cost_record: dict[str, str | None] = field(default_factory=dict)
    cost: CostModel | None = None  # the simulator only
    exits: ExitSource | None = None  # the simulator only

    @property
    def row(self) -> PointRow:
        return {"point_id": self.point_id, "values": self.values}

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items()) or "base"

    @property
    def derived_chunk(self) -> int | None:
        """The chunk ``chunk_policy: derive`` gave every arm; None when the point kept its
        own."""
        out = None
        for cfg in self.configs.values():
            s = cfg.scheduler
            if s.effective_chunk_size != s.prefill_chunk_size:
                out = s.effective_chunk_size
        return out

    @property
    def exit_lambdas(self) -> Sequence[float] | None:
        """The synthetic exit stream's mean λ per depth (``exit.lambdas``)."""
        return self.scenario.exit.lambdas

    @property
    def exit_profile(self) -> ExitProfile | None:
        """The measured exit profile the simulator draws from (preferred over the λ means)."""
        return None if self.exits is None else self.exits.profile

    @property
    def exit_draw(self) -> ExitDraw:
        """How a token without a measured row of its own picks one (``exit.draw``)."""
        return self.scenario.exit.draw


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
        if all(lookup(scenario, k) == v for k, v in values.items() if k != VARIANT_KEY):
            return int(p["point_id"])
    return int(points[0]["point_id"])


def lookup(data: Any, dotted: str, missing: Any = None) -> Any:
    """The value at dotted path ``dotted`` in nested dicts, or ``missing`` when it is absent."""
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return missing
        node = node[part]
    return node

