"""The tune space: the scenario's ``tune:`` section expanded into configurations.

A configuration is one value per tuned field (a dotted scenario field, or ``arm``), applied
to the scenario without its sweep, variants and tune sections, with that one arm. When
``tune:`` does not list ``arm`` the scenario's arms are the arm dimension. Every
configuration is validated as ``loopserve capacity`` would (the schema, then planning: the
core's mixed guard, the memory and size checks); one that fails is kept, ``rejected`` with
the reason. The scenario's own values (per arm of the scenario) are always candidates,
``is_default``, appended when the grid does not hold them. Fields are generic: any dotted
path the schema accepts can be tuned, new sections included.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

from loopserve.errors import UserError
from loopserve.plan import plan_runs
from loopserve.plan.sweep import lookup
from loopserve.runs.capacity_probe import at_rate
from loopserve.schema.load import set_path, validate
from loopserve.schema.scenario import Scalar, Scenario

ARM = "arm"
UNSET = None  # a field the scenario leaves unset: its default configuration does not set it


@dataclass(frozen=True)
class Config:
    """One point of the space: its values (``arm`` included), and its scenario (one arm,
    no tune section) or why it was rejected."""

    config_id: int
    values: dict[str, Any]
    is_default: bool
    scenario: Scenario | None
    rejected: str | None = None

    @property
    def arm(self) -> str:
        return str(self.values[ARM])

    @property
    def key(self) -> str:
        """The values as canonical JSON: what a stored probe is filed under."""
        return json.dumps(self.values, sort_keys=True)

    @property
    def label(self) -> str:
        return " ".join(f"{k}={_text(v)}" for k, v in self.values.items())


def _text(value: Any) -> str:
    return "default" if value is UNSET else json.dumps(value)


def base_data(scn: Scenario) -> dict[str, Any]:
    """The scenario as a raw mapping, without sweep, variants and tune."""
    data: dict[str, Any] = scn.model_dump(exclude_unset=True)
    for key in ("sweep", "variants", "tune"):
        data.pop(key, None)
    return data


def configure(scn: Scenario, values: dict[str, Any]) -> Scenario:
    """The scenario with ``values`` filled in (one arm); UserError when the schema rejects
    it."""
    data = base_data(scn)
    arm = str(values[ARM])
    data["arms"] = [arm]
    overrides = data.get("arm_overrides") or {}
    data["arm_overrides"] = {a: o for a, o in overrides.items() if a == arm}
    for key, value in values.items():
        if key != ARM and value is not UNSET:
            set_path(data, key, value)
    return validate(data).located(scn.base_dir)


def _check(scn: Scenario, values: dict[str, Any], start: float) -> tuple[Scenario | None,
                                                                       str | None]:
    try:
        configured = configure(scn, values)
        plan_runs(at_rate(configured, str(values[ARM]), start), "sim")
    except UserError as err:
        return None, str(err)
    return configured, None


def expand(scn: Scenario, start: float) -> list[Config]:
    """Every configuration of the space, the defaults last unless the grid holds them.
    UserError (exit 2) naming ``tune.<field>`` when a value is rejected in every
    configuration that has it (an unknown field's every value is)."""
    if not scn.tune:
        raise UserError("tune", "the scenario has no tune section; add one, e.g. tune: "
                        "{scheduler.max_num_seqs: [16, 32], arm: [per_depth, mixed]}")
    space: dict[str, list[Scalar]] = {ARM: list(scn.arms)} if ARM not in scn.tune else {}
    space.update(scn.tune)
    dump = scn.model_dump()
    grid = [dict(zip(space, combo, strict=True)) for combo in itertools.product(*space.values())]
    defaults = [{k: (arm if k == ARM else lookup(dump, k, UNSET)) for k in space}
                for arm in scn.arms]
    keys = [json.dumps(g, sort_keys=True) for g in grid]
    grid += [d for d in defaults if json.dumps(d, sort_keys=True) not in keys]
    default_keys = {json.dumps(d, sort_keys=True) for d in defaults}
    configs = []
    for i, values in enumerate(grid):
        configured, reason = _check(scn, values, start)
        configs.append(Config(i, values, json.dumps(values, sort_keys=True) in default_keys,
                              configured, reason))
    for key, values in space.items():
        for value in values:
            having = [c for c in configs if c.values[key] == value
                      and type(c.values[key]) is type(value)]
            if having and all(c.rejected for c in having):
                raise UserError(f"tune.{key}", f"{_text(value)} is rejected in every "
                                f"configuration ({having[0].rejected}); remove it or fix "
                                "the field")
    return configs
