"""Exit profiles: gate values λ_0..λ_{D-1} of real output tokens, measured from the model.

File format ``loopserve-exit-profile/1`` (JSON; ``loopserve exit-profile`` writes it, by
default as ``results/profiles/<hardware>-<model>.exits.json`` beside the cost profile)::

    {
      "format": "loopserve-exit-profile/1",
      "model": "small", "num_depths": 4,
      "provenance": {"model": "small", "checkpoint_sha256": null,
                     "prompt_source": "generated: 24 prompts ...", "num_prompts": 24,
                     "num_tokens": 1512, "seed": 0, "device": "...", "dtype": "float32",
                     "torch_version": "2.13.0", "commit": "<sha>", "date": "..."},
      "tokens": [[0, 17], ...],          # (prompt index, position) of each row, measured order
      "lambdas": [[0.41, 0.52, 0.49, 0.55], ...],  # one row per decode token, all D depths
      "regimes": [{"mode": "ouro", "exit_threshold": 0.8, "max_loops": 4, ...,
                   "tokens": [...], "signals": [[0.41, 0.52, null, null], ...]}]  # optional
    }

Every row holds the gate at all D depths: the measurement runs every token the full depth, so
any threshold, ``min_loops``, ``max_loops`` and signal mode can be replayed from one file.
Optional ``regimes`` (``sim.exit_regime``) hold rows measured with the exits on under one
policy each; ``rows_for`` prefers the regime that matches the replayed policy, because exits
feed back into later tokens and full-depth rows then overstate the deep exits.
The first output token of a request comes from the prompt and always runs D loops; it has no
row. ``implied_depths`` applies the core's own exit deciders to the rows. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, model_validator

from engine.core.config import ExitConfig
from engine.core.exits import make_decider
from sim.exit_regime import ExitRegime
from sim.profile_file import read_versioned

EXIT_PROFILE_FORMAT = "loopserve-exit-profile/1"


class ExitProvenance(BaseModel):
    """What was measured, from which weights and prompts."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str
    checkpoint_sha256: str | None = None  # None: seeded random weights of a preset
    prompt_source: str
    num_prompts: int
    num_tokens: int
    seed: int
    device: str
    dtype: str
    torch_version: str
    commit: str
    date: str
    max_tokens: int | None = None
    command: list[str] | None = None


class LookaheadScores(BaseModel):
    """random_lookahead's frozen head (``seed``): its score per row and depth."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    seed: int
    scores: list[list[float]]


class ExitProfile(BaseModel):
    """Measured per-token gate vectors (see the module docstring for the file)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    format: str = EXIT_PROFILE_FORMAT
    model: str
    num_depths: int
    provenance: ExitProvenance
    tokens: list[tuple[int, int]]
    lambdas: list[list[float]]
    lookahead: LookaheadScores | None = None
    regimes: list[ExitRegime] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ExitProfile:
        if not self.lambdas:
            raise ValueError("lambdas: the profile holds no tokens; re-measure with more prompts")
        if len(self.tokens) != len(self.lambdas):
            raise ValueError(f"tokens: {len(self.tokens)} entries for {len(self.lambdas)} rows")
        for i, row in enumerate(self.lambdas):
            if len(row) != self.num_depths:
                raise ValueError(f"lambdas[{i}]: {len(row)} values, expected {self.num_depths}")
            if any(not 0.0 <= v <= 1.0 for v in row):
                raise ValueError(f"lambdas[{i}]: gate values must lie in [0, 1]")
        if self.lookahead is not None and len(self.lookahead.scores) != len(self.lambdas):
            raise ValueError("lookahead.scores: needs one row per lambdas row")
        for r in self.regimes or ():
            if any(len(row) != self.num_depths for row in r.signals):
                raise ValueError(f"regime {r.label}: rows need {self.num_depths} entries")
        return self

    def regime_for(self, cfg: ExitConfig, layout: str) -> ExitRegime | None:
        """The regime measured under exactly ``cfg`` and ``layout``, if the file has one."""
        return next((r for r in self.regimes or () if r.matches(cfg, self.num_depths, layout)),
                    None)

    def rows_for(self, cfg: ExitConfig, layout: str) -> Sequence[Sequence[float | None]]:
        """The rows a replay under ``cfg`` draws from: its regime's, else ``signal_rows``."""
        regime = self.regime_for(cfg, layout)
        return regime.signals if regime is not None else self.signal_rows(cfg)

    def signal_rows(self, cfg: ExitConfig) -> list[list[float]]:
        """The rows ``cfg.mode`` reads: gate λ, or the lookahead head's scores for
        random_lookahead (the head of ``cfg.seed``, as the real runner builds it)."""
        if cfg.mode != "random_lookahead":
            return self.lambdas
        if self.lookahead is None or self.lookahead.seed != cfg.seed:
            have = "none" if self.lookahead is None else f"seed {self.lookahead.seed}"
            raise ValueError(f"exit.profile: random_lookahead needs the head scores of seed "
                             f"{cfg.seed} (the profile has {have}); re-measure with "
                             f"loopserve exit-profile --lookahead-seed {cfg.seed}")
        return self.lookahead.scores


def load_exit_profile(source: str | Path | ExitProfile, where: str = "exit.profile") -> ExitProfile:
    """Read and validate; ValueError("<where>: PATH: reason") when unusable."""
    if isinstance(source, ExitProfile):
        return source
    return read_versioned(source, ExitProfile, fmt=EXIT_PROFILE_FORMAT, where=where,
                          what="exit profile", fix="re-measure it with loopserve exit-profile")


def exit_profile_json(profile: ExitProfile) -> str:
    """The file's text: compact JSON (thousands of rows), unset optional parts left out."""
    return profile.model_dump_json(exclude_none=True) + "\n"


def sibling_exit_profile(cost_profile: str | Path) -> Path | None:
    """``X.exits.json`` beside the calibrated cost profile ``X.json``, when it exists."""
    path = Path(cost_profile)
    sib = path.with_name(path.name.removesuffix(".json") + ".exits.json")
    return sib if sib.is_file() else None


def exit_depth(row: Sequence[float | None], cfg: ExitConfig, num_depths: int) -> int:
    """Loops a token with gate vector ``row`` runs under ``cfg`` (the core's decider);
    ValueError when it reads a depth the row did not run (a regime row under another policy)."""
    decider = make_decider(cfg, num_depths, request_key="profile")
    decider.start_token(1)
    for depth in range(num_depths):
        need = decider.needs_signal(depth)
        signal = row[depth] if need else None
        if need and signal is None:
            raise ValueError(f"exit.profile: a regime row read at depth {depth}, past its exit")
        if decider.after_depth(depth + 1, signal):
            return depth + 1
    return num_depths


def implied_depths(profile: ExitProfile, cfg: ExitConfig,
                   layout: str = "last_exited") -> list[int]:
    """Each row's exit depth under ``cfg`` (in row order), from the rows a replay under
    ``cfg`` and ``layout`` draws (``rows_for``)."""
    return [exit_depth(row, cfg, profile.num_depths) for row in profile.rows_for(cfg, layout)]


def depth_histogram(depths: Sequence[int], num_depths: int) -> list[float]:
    """Fraction of tokens exiting after 1..D loops (zeros when there are none)."""
    counts = [0] * num_depths
    for d in depths:
        counts[d - 1] += 1
    total = len(depths)
    return [c / total if total else 0.0 for c in counts]


def tv_distance(p: Sequence[float], q: Sequence[float]) -> float:
    """Total-variation distance between two distributions over the same depths."""
    return 0.5 * sum(abs(a - b) for a, b in zip(p, q, strict=True))
