"""The simulator's signal streams equal their reference definitions bit for bit: the λ stream
is logit-normal through ``NormalDist().inv_cdf`` of a ``stable_seed`` uniform, and a profile
row is ``request_row`` / ``profile_row`` of the token."""

from __future__ import annotations

import math
import statistics

from engine.core.exits import stable_seed
from sim import exit_model
from sim.exit_model import (
    lambda_signal_fn,
    profile_row,
    profile_signal_fn,
    prompt_rows,
    request_row,
)


def _reference_lambda(seed: int, means: tuple[float, ...], sigma: float, rid: str, pos: int,
                      depth: int) -> float:
    u = (stable_seed(seed, "lambda", rid, pos, depth) >> 11) / float(1 << 53)
    z = statistics.NormalDist().inv_cdf(min(max(u, 1e-12), 1.0 - 1e-12))
    m = means[min(depth, len(means) - 1)]
    x = math.log(m / (1.0 - m)) + sigma * z
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def test_the_quantile_is_normal_dist_inv_cdf_on_many_values() -> None:
    reference = statistics.NormalDist().inv_cdf
    ps = [1e-12, 1 - 1e-12, 0.5, 0.075, 0.925, 0.0749999, 0.9250001, 1e-300, 0.999999999]
    ps += [(i + 0.5) / 20000 for i in range(20000)]
    ps += [(stable_seed(1, i) >> 11) / float(1 << 53) or 0.5 for i in range(5000)]
    for p in ps:
        assert exit_model._normal_inv_cdf(p, 0.0, 1.0).hex() == reference(p).hex()


def test_the_lambda_stream_is_its_definition_on_many_tokens() -> None:
    means = (0.15, 0.3, 0.45, 0.6)
    for seed, sigma in ((0, 0.5), (17, 1.3)):
        fn = lambda_signal_fn(seed, means, sigma)
        for i in range(6000):
            rid, pos, depth = f"req-{i % 53}", (i * 131) % 2000, i % 6
            assert fn(rid, pos, depth).hex() == _reference_lambda(
                seed, means, sigma, rid, pos, depth).hex()


def test_profile_rows_are_request_row_and_profile_row_on_many_tokens() -> None:
    rows = [[(k * 0.37 + d * 0.11) % 1.0 for d in range(4)] for k in range(40)]
    tokens = [(k // 7, (k * 3) % 7) for k in range(40)]  # 6 prompts, positions unordered
    prompts = prompt_rows(tokens)
    ids = [f"r{i}" for i in range(exit_model._MAX_PICKS + 50)]  # past the kept picks
    by_request = profile_signal_fn(5, rows, None, prompts)
    by_token = profile_signal_fn(5, rows)
    for i in range(len(ids) * 2):
        rid, pos, depth = ids[(i * 7) % len(ids)], i % 300, i % 4
        assert by_request(rid, pos, depth) == rows[request_row(5, prompts, rid, pos)][depth]
        assert by_token(rid, pos, depth) == rows[profile_row(5, len(rows), rid, pos)][depth]
