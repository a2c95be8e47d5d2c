"""Which exit model a simulated sweep point uses (docs/design.md): a measured exit profile, the
synthetic λ stream, or none (modes the core decides alone). Resolved once per point at plan
time, so a bad profile fails before any run; the label goes to env.json."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.core.config import ModelShape
from loopserve.errors import UserError
from loopserve.schema.build import exit_config
from loopserve.schema.exit_spec import SIGNAL_EXIT_MODES
from loopserve.schema.scenario import Scenario
from sim.cost.resolve import resolve_cost

if TYPE_CHECKING:
    from sim.exit_profile import ExitProfile

UNMEASURED_NOTE = ("adaptive exits come from a synthetic gate stream, not from the model: no "
                   "measured exit profile (exit.profile, or <cost profile stem>.exits.json); "
                   "measure one with `loopserve exit-profile --scenario SCENARIO --target "
                   "cpu|cuda`")


@dataclass(frozen=True)
class ExitSource:
    """A point's exit model: ``kind`` is profile | synthetic | core; ``path`` the profile's."""

    kind: str
    profile: ExitProfile | None = None
    path: str | None = None
    via: str | None = None  # "exit.profile" or "cost.profile" (the calibrated profile's sibling)
    rows: str | None = None  # "regime <label>" (measured under the point's policy) or "full depth"
    draw: str | None = None  # exit.draw: how tokens without an own row pick one

    @property
    def unmeasured(self) -> bool:
        """Adaptive exits drawn from the synthetic stream for want of a measured profile
        (not because ``exit.lambdas`` asked for it)."""
        return self.kind == "synthetic" and self.via is None

    def describe(self) -> dict[str, object]:
        """The env.json entry: kind, and for a profile its file and measured token count;
        for exits no profile measured, the note that says so."""
        out: dict[str, object] = {"kind": self.kind}
        if self.unmeasured:
            out["note"] = UNMEASURED_NOTE
        if self.profile is not None:
            out.update(path=self.path, via=self.via,
                       num_tokens=self.profile.provenance.num_tokens,
                       model=self.profile.model, rows=self.rows, draw=self.draw)
        return out


def exit_source(scn: Scenario, shape: ModelShape, seeds: Sequence[int],
                context: str = "") -> ExitSource:
    """The point's exit model for runs on ``seeds`` (its repeats'); UserError naming
    exit.profile when the file is unusable."""
    e = scn.exit
    if e.mode not in SIGNAL_EXIT_MODES:
        return ExitSource("core")
    if e.lambdas is not None:
        return ExitSource("synthetic", via="exit.lambdas")
    if e.exit_threshold >= 1.0:
        # no token exits before the last depth: the signals are read, never acted on, so
        # the synthetic stream gives the model's own depths and nothing needs measuring
        return ExitSource("synthetic", via="exit.exit_threshold")
    # Exit profiles' modules load only for a point that reads one.
    from sim.exit_profile import load_exit_profile, sibling_exit_profile

    path, via = e.profile, "exit.profile"
    if path is None:
        kind, cost_profile = resolve_cost(scn.cost.kind, scn.cost.profile, scn.hardware,
                                          scn.model, scn.base_dir)
        sib = sibling_exit_profile(cost_profile) if kind == "calibrated" and cost_profile else None
        if sib is None:
            return ExitSource("synthetic")
        path, via = str(sib), "cost.profile"
    try:
        profile = load_exit_profile(path)
        if profile.num_depths != shape.num_depths:
            raise ValueError(f"exit.profile: {path}: measured with {profile.num_depths} depths, "
                             f"the model has {shape.num_depths}; use the model's own profile")
        cfg = exit_config(scn)
        regime = profile.regime_for(cfg, scn.cache.layout)
        if regime is None:
            profile.signal_rows(cfg)  # random_lookahead: the head's scores exist
    except ValueError as err:
        raise UserError.from_value_error(err, "exit.profile", context) from None
    rows = "full depth"
    if regime is not None:
        own = sum(bool(regime.own_rows(s)) for s in seeds)
        rows = f"regime {regime.label}, own rows for {own} of {len(seeds)} repeat seeds"
    return ExitSource("profile", profile, path, via, rows, e.draw)


def unmeasured_note(exits: Iterable[ExitSource | None]) -> str | None:
    """The note to print when a point's adaptive exits have no measured profile."""
    return UNMEASURED_NOTE if any(e is not None and e.unmeasured for e in exits) else None


def exit_models(exits: Mapping[int, ExitSource | None]) -> dict[str, object] | None:
    """env.json's record of each simulated point's exit model by point id (None for a real
    run)."""
    return {str(i): e.describe() for i, e in exits.items() if e is not None} or None
