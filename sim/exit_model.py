"""Gate signals for the adaptive exit modes in simulation (docs/design.md).

``fixed``, ``trace`` and ``categorical`` are decided by the core from seeded per-request
streams and need no signal. ``ouro``, ``ouro_delayed`` and ``random_lookahead`` read one
signal per decode row and depth. With an exit profile (``sim.exit_profile``) a token's whole
vector is one measured row (of the regime measured under the same policy, when the profile has
one: ``sim.exit_regime``), so the correlation between its depths is the model's
(``profile_signal_fn``). A token measured from this very request reads its own row; any other
request reads the rows of one measured prompt, picked by a hash of (seed, request), so its
tokens exit alike as a real request's do (``draw: request``), or each token any row, by a
hash of (seed, request, position) (``draw: token``). Without a profile it is synthetic (the
explicit fallback): λ at depth d is logit-normal around a
per-depth mean, ``sigmoid(logit(mean_lambdas[d]) + sigma * z)`` with z a standard normal
drawn from a hash of (seed, request, position, depth). The same seed gives the same λ for the
same token and depth in every arm, however the work was batched. For ``random_lookahead`` the
same value is read as the lookahead score ("exit after one more loop" when it reaches the
threshold).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, Literal

from engine.core.config import ExitConfig
from engine.core.exits import reads_signals, stable_seed
from engine.core.seeded_executor import SignalFn
from engine.core.stable_seeds import StableSeeds

if TYPE_CHECKING:
    from sim.exit_profile import ExitProfile

# Synthetic per-depth mean λ for D = 4: rising with depth, so deeper loops exit more often.
DEFAULT_MEAN_LAMBDAS: tuple[float, ...] = (0.15, 0.3, 0.45, 0.6)
SIGNAL_MODES: frozenset[str] = frozenset({"ouro", "ouro_delayed", "random_lookahead"})
# How a token without an own row picks a profile row: keep a request on one measured prompt,
# so its tokens exit alike as the real model's do, or draw each token from any row.
ExitDraw = Literal["request", "token"]
EXIT_DRAWS: tuple[str, ...] = ("request", "token")
_EPS: Final = 1e-12
_MAX_PICKS: Final = 4096  # kept per-request prompt picks; a run holds far fewer at once


def _reference_inv_cdf(p: float, mu: float, sigma: float) -> float:
    return statistics.NormalDist(mu, sigma).inv_cdf(p)


# NormalDist().inv_cdf(p) checks p and sigma, then returns _normal_dist_inv_cdf(p, 0.0, 1.0)
# (C where the interpreter has it); a signal's p is already inside (0, 1), so it calls that
# directly and skips the interpreted wrapper.
_normal_inv_cdf: Callable[[float, float, float], float] = getattr(
    statistics, "_normal_dist_inv_cdf", _reference_inv_cdf)


def _logit(p: float) -> float:
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return math.log(p / (1.0 - p))


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def default_mean_lambdas(num_depths: int) -> tuple[float, ...]:
    """DEFAULT_MEAN_LAMBDAS for D = 4; otherwise evenly spaced from 0.15 to 0.6."""
    if num_depths == len(DEFAULT_MEAN_LAMBDAS):
        return DEFAULT_MEAN_LAMBDAS
    if num_depths == 1:
        return (0.15,)
    return tuple(0.15 + 0.45 * d / (num_depths - 1) for d in range(num_depths))


def lambda_signal_fn(seed: int, mean_lambdas: Sequence[float], sigma: float = 0.5) -> SignalFn:
    """A deterministic λ stream: logit-normal around ``mean_lambdas[depth]`` (clamped
    to the last entry for deeper depths)."""
    if not mean_lambdas:
        raise ValueError("exit.mean_lambdas: needs one mean per depth")
    for m in mean_lambdas:
        if not 0.0 <= m <= 1.0:
            raise ValueError(f"exit.mean_lambdas: each mean must be in [0, 1], got {m!r}")
    if sigma < 0:
        raise ValueError(f"exit.lambda_sigma: must be >= 0, got {sigma!r}")
    # A mean of exactly 0 or 1 gives that constant λ (an infinite logit).
    logits = tuple(_logit(m) for m in mean_lambdas)
    last = len(logits) - 1
    inv_cdf = _normal_inv_cdf
    seeds = StableSeeds(seed, "lambda")
    low = _EPS
    high = 1.0 - _EPS

    def signal(request_id: str, position: int, depth: int) -> float:
        u = (seeds.at_depth(request_id, position, depth) >> 11) / 9007199254740992.0  # 2**53
        z = inv_cdf(low if u < low else high if u > high else u, 0.0, 1.0)
        x = logits[depth if depth < last else last] + sigma * z
        return _sigmoid(x)

    return signal


def profile_row(seed: int, num_rows: int, request_id: str, position: int) -> int:
    """The profile row a token reads under ``draw: token``: the same for the same (seed,
    request, position), any row of the profile."""
    return stable_seed(seed, "profile", request_id, position) % num_rows


def prompt_rows(tokens: Sequence[tuple[int, int]]) -> tuple[tuple[int, ...], ...]:
    """Row indices of each measured prompt, in position order (prompts in index order)."""
    by_prompt: dict[int, list[tuple[int, int]]] = {}
    for k, (prompt, position) in enumerate(tokens):
        by_prompt.setdefault(prompt, []).append((position, k))
    return tuple(tuple(k for _, k in sorted(by_prompt[p])) for p in sorted(by_prompt))


def request_row(seed: int, prompts: Sequence[Sequence[int]], request_id: str,
                position: int) -> int:
    """The profile row a token reads under ``draw: request``: every token of a request reads
    the rows of one measured prompt (picked by (seed, request)), walking them in position
    order from a start picked the same way, round again when the request outlives them."""
    rows, start = _request_prompt(seed, prompts, request_id)
    return rows[(position + start) % len(rows)]


def _request_prompt(seed: int, prompts: Sequence[Sequence[int]],
                    request_id: str) -> tuple[Sequence[int], int]:
    """The rows of the prompt ``request_id`` reads and the start of its walk."""
    pick = stable_seed(seed, "profile-request", request_id)
    return prompts[pick % len(prompts)], pick >> 32


def profile_signal_fn(seed: int, rows: Sequence[Sequence[float | None]],
                      own: Mapping[tuple[str, int], int] | None = None,
                      prompts: Sequence[Sequence[int]] | None = None) -> SignalFn:
    """Signals from measured rows: token (request, position) reads its own row when ``own``
    has it (measured from this very request), else the row ``request_row`` picks from
    ``prompts`` (its rows grouped by measured prompt) when given, else row ``profile_row``.
    A regime row has no value past the depth it exited at; such a depth reads NaN, which a
    decider that needs it rejects (a policy mismatch), while a readback with
    ``readback_skip`` off reads it without using it."""
    table = tuple(tuple(r) for r in rows)
    n = len(table)
    if n == 0:
        raise ValueError("exit.profile: the profile holds no rows")
    mine = own or {}
    groups = tuple(tuple(g) for g in prompts or () if g)
    if prompts is not None and not groups:
        raise ValueError("exit.profile: the profile holds no prompts")

    # request_row and profile_row, with each request's prompt picked once and its hash kept.
    picks: dict[str, tuple[Sequence[int], int]] = {}
    row_seeds = StableSeeds(seed, "profile")

    def signal(request_id: str, position: int, depth: int) -> float:
        k = mine.get((request_id, position)) if mine else None
        if k is None:
            if groups:
                pick = picks.get(request_id)
                if pick is None:
                    if len(picks) >= _MAX_PICKS:
                        picks.clear()
                    pick = picks[request_id] = _request_prompt(seed, groups, request_id)
                rows, start = pick
                k = rows[(position + start) % len(rows)]
            else:
                k = row_seeds.at(request_id, position) % n
        v = table[k][depth]
        return math.nan if v is None else v

    return signal


def make_signal_fn(
    exit_cfg: ExitConfig,
    num_depths: int,
    *,
    seed: int,
    mean_lambdas: Sequence[float] | None = None,
    sigma: float = 0.5,
    profile: ExitProfile | None = None,
    layout: str = "last_exited",
    draw: ExitDraw = "request",
) -> SignalFn | None:
    """The signal function for ``exit_cfg.mode``, or None when the core decides alone; from
    ``profile`` when one is given (its regime for ``exit_cfg`` and the cache ``layout`` when
    it has one, else its full-depth rows; a token without an own row reads a row of one
    measured prompt per request, ``draw: request``, or any row, ``draw: token``), else the
    synthetic stream. At an ``exit_threshold`` no decider reads a value of
    (``engine.core.exits.reads_signals``: every token runs ``max_loops``), the stream is
    built to check its settings and the rows read back carry 0.0 instead of a draw."""
    fn = _stream(exit_cfg, num_depths, seed=seed, mean_lambdas=mean_lambdas, sigma=sigma,
                 profile=profile, layout=layout, draw=draw)
    if fn is None or reads_signals(exit_cfg.exit_threshold):
        return fn
    return _unread_signal


def _unread_signal(request_id: str, position: int, depth: int) -> float:
    return 0.0


def _stream(
    exit_cfg: ExitConfig,
    num_depths: int,
    *,
    seed: int,
    mean_lambdas: Sequence[float] | None,
    sigma: float,
    profile: ExitProfile | None,
    layout: str,
    draw: ExitDraw,
) -> SignalFn | None:
    if exit_cfg.mode not in SIGNAL_MODES:
        return None
    if profile is not None:
        if profile.num_depths != num_depths:
            raise ValueError(f"exit.profile: measured with {profile.num_depths} depths, the "
                             f"model has {num_depths}; use the model's own exit profile")
        # Row choice ignores the mode: ouro vs ouro_delayed compare on the same tokens' gates.
        regime = profile.regime_for(exit_cfg, layout)
        if draw not in EXIT_DRAWS:
            raise ValueError(f"exit.draw: unknown {draw!r}; use one of {'|'.join(EXIT_DRAWS)}")
        if regime is not None:
            return profile_signal_fn(seed, regime.signals, regime.own_rows(seed),
                                     prompt_rows(regime.tokens) if draw == "request" else None)
        return profile_signal_fn(seed, profile.signal_rows(exit_cfg), None,
                                 prompt_rows(profile.tokens) if draw == "request" else None)
    means = tuple(mean_lambdas) if mean_lambdas is not None else default_mean_lambdas(num_depths)
    if len(means) != num_depths:
        raise ValueError(
            f"exit.mean_lambdas: needs {num_depths} entries (one per depth), got {len(means)}"
        )
    return lambda_signal_fn(stable_seed(seed, exit_cfg.mode), means, sigma)
