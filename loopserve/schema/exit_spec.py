"""The scenario's ``exit`` section: how decode tokens leave the loop, and where the
simulator's gate signals come from (docs/design.md, docs/exit-profiles.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from engine.core.config import ExitMode
from loopserve.errors import short_repr
from loopserve.schema.strict import StrictModel

SIGNAL_EXIT_MODES = ("ouro", "ouro_delayed", "random_lookahead")


class ExitSpec(StrictModel):
    """Default exit config for every request (docs/design.md).

    ``lambdas`` (simulator only): mean gate value λ per depth for the synthetic signal streams
    of the signal-driven modes (ouro, ouro_delayed, random_lookahead). ``trace`` (mode trace):
    a run-wide exit-depth pattern, first entry D, the rest repeated over each request's
    tokens; requests of a trace file with their own ``exit_depths`` keep theirs.
    ``profile`` (simulator only): an exit profile measured from the model (``loopserve
    exit-profile``) that the signal modes draw whole per-token λ vectors from (a regime's rows
    measured under this policy and cache layout first: docs/exit-profiles.md); without it a
    calibrated cost profile's sibling ``<stem>.exits.json``, else the synthetic stream.
    ``draw`` (with a profile): how a token the profile did not measure from its own request
    picks a row: ``request`` keeps each request on the rows of one measured prompt, so its
    tokens exit alike as a real request's do (deep requests stay deep); ``token`` draws every
    token from any row (the mix is the same on average; requests then all look alike).
    """

    mode: ExitMode = "fixed"
    exit_threshold: float = Field(default=1.0, ge=0.0)
    min_loops: int = Field(default=1, ge=1)
    max_loops: int | None = Field(default=None, ge=1)
    probs: list[float] | None = None
    lambdas: list[float] | None = None
    trace: list[int] | None = None
    profile: str | None = None
    draw: Literal["request", "token"] = "request"
    seed: int | None = None

    @field_validator("lambdas")
    @classmethod
    def _unit_interval(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (not v or any(not 0.0 < x < 1.0 for x in v)):
            raise ValueError(f"each mean λ must lie strictly between 0 and 1, got {short_repr(v)}")
        return v

    @model_validator(mode="after")
    def _mode_fits(self) -> ExitSpec:
        if self.lambdas is not None and self.mode not in SIGNAL_EXIT_MODES:
            raise ValueError(
                f"lambdas: only for the signal modes {'|'.join(SIGNAL_EXIT_MODES)}, "
                f"not {self.mode}; remove lambdas"
            )
        if self.lambdas is not None and self.profile is not None:
            raise ValueError("lambdas: the synthetic means and an exit profile exclude each "
                             "other; remove lambdas or profile")
        if "draw" in self.model_fields_set and self.profile is None and self.lambdas is not None:
            raise ValueError("draw: picks rows of an exit profile, and lambdas selects the "
                             "synthetic stream; remove draw or lambdas")
        if self.trace is not None and self.mode != "trace":
            raise ValueError(f"trace: only for mode trace, not {self.mode}; remove trace")
        if self.profile is not None and self.mode not in SIGNAL_EXIT_MODES:
            raise ValueError(
                f"profile: an exit profile drives the signal modes "
                f"{'|'.join(SIGNAL_EXIT_MODES)}, not {self.mode}; remove profile"
            )
        if self.probs is not None and self.mode != "categorical":
            raise ValueError(f"probs: only for mode categorical, not {self.mode}; remove probs")
        return self
