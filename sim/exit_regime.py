"""Exit regimes: gate rows measured with the exits on, for replaying that exact exit policy.

A full-depth profile row is what the model computes when every earlier token ran all D loops.
With adaptive exits the model is a different system: a token that leaves after k loops emits
the token of depth k (so the next input differs) and its KV at the deeper planes is a copy of
plane k-1 (``cache.layout``), which the deeper depths of later tokens attend to. On the small
preset at threshold 0.8 the depths measured that way differ from those the full-depth rows
imply by a total-variation distance of 0.085 on the same prompts. A regime holds rows measured
under one exit policy: each token's signal at every depth it actually ran, ``None`` beyond its
exit. Replayed under the same policy the core's decider reads exactly those depths, so the
simulation takes the measured exits; another policy falls back to the full-depth rows.

A regime measured on a scenario's own workload (``loopserve exit-profile --scenario``) also
records, per prompt, the workload seed and request id it came from (``sources``): a simulated
token of that request in a run of that seed then reads its own row, so the simulation replays
the measured exits token for token (deep requests stay deep); any other token draws a row.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, model_validator

from engine.core.config import ExitConfig


class ExitRegime(BaseModel):
    """Rows measured under one exit policy (the fields of ``ExitConfig`` that decide depths,
    and the cache layout that decides what deeper planes hold)."""

    model_config = ConfigDict(extra="forbid")

    mode: str
    exit_threshold: float
    min_loops: int = 1
    max_loops: int  # resolved: the model's depth when the policy left it open
    seed: int = 0  # random_lookahead's head
    layout: str = "last_exited"
    prompt_source: str | None = None  # when it differs from the profile's
    sources: list[tuple[int, str]] | None = None  # per prompt: (workload seed, request id)
    tokens: list[tuple[int, int]]
    signals: list[list[float | None]]  # the mode's signal per depth run, None past the exit

    @model_validator(mode="after")
    def _consistent(self) -> ExitRegime:
        if not self.signals:
            raise ValueError(f"regime {self.label}: holds no rows; re-measure with more prompts")
        if len(self.tokens) != len(self.signals):
            raise ValueError(f"regime {self.label}: {len(self.tokens)} tokens for "
                             f"{len(self.signals)} rows")
        if self.sources is not None and any(i >= len(self.sources) for i, _ in self.tokens):
            raise ValueError(f"regime {self.label}: a token names a prompt without a source")
        for i, row in enumerate(self.signals):
            ran = [v for v in row if v is not None]
            if not ran or any(v is None for v in row[:len(ran)]):
                raise ValueError(f"regime {self.label}: signals[{i}] must hold the depths run "
                                 "first and None only after them")
            if any(not math.isfinite(v) for v in ran):
                raise ValueError(f"regime {self.label}: signals[{i}] holds a non-finite value")
        return self

    @property
    def label(self) -> str:
        """E.g. ``ouro@0.8`` (plus loops bounds, head seed and layout when not the default)."""
        out = f"{self.mode}@{self.exit_threshold:g}"
        if self.min_loops != 1:
            out += f" min_loops={self.min_loops}"
        out += f" max_loops={self.max_loops}"
        if self.mode == "random_lookahead":
            out += f" seed={self.seed}"
        return f"{out} {self.layout}"

    def matches(self, cfg: ExitConfig, num_depths: int, layout: str) -> bool:
        """Whether replaying under ``cfg`` and ``layout`` takes the depths this regime ran."""
        return (cfg.mode == self.mode
                and math.isclose(cfg.exit_threshold, self.exit_threshold, rel_tol=1e-9)
                and cfg.min_loops == self.min_loops
                and cfg.resolved_max_loops(num_depths) == self.max_loops
                and (cfg.mode != "random_lookahead" or cfg.seed == self.seed)
                and layout == self.layout)


    def own_rows(self, seed: int) -> dict[tuple[str, int], int]:
        """(request id, position) -> row index, for the prompts measured from a workload
        drawn with ``seed`` (empty when the regime has none)."""
        if self.sources is None:
            return {}
        return {(self.sources[i][1], pos): k for k, (i, pos) in enumerate(self.tokens)
                if self.sources[i][0] == seed}


def regime_of(cfg: ExitConfig, num_depths: int, layout: str, tokens: list[tuple[int, int]],
              signals: list[list[float | None]], prompt_source: str | None = None,
              sources: list[tuple[int, str]] | None = None) -> ExitRegime:
    """The regime record of rows measured under ``cfg`` and ``layout``."""
    return ExitRegime(mode=cfg.mode, exit_threshold=cfg.exit_threshold, min_loops=cfg.min_loops,
                      max_loops=cfg.resolved_max_loops(num_depths), seed=cfg.seed,
                      layout=layout, prompt_source=prompt_source, sources=sources,
                      tokens=tokens, signals=signals)
