"""The simulator's signal streams equal their reference definitions bit for bit: the λ stream
is logit-normal through ``NormalDist().inv_cdf`` of a ``stable_seed`` uniform, and a profile
row is ``request_row`` / ``profile_row`` of the token; a signal no decider reads is not
drawn."""

from __future__ import annotations

import math
import statistics

import pytest

from engine.core import ExitConfig
from engine.core.exits import stable_seed
from engine.core.shapes import TINY
from loopserve.workloads import build_source
from sim import exit_model, make_cost_model, simulate
from sim.exit_model import (
    default_mean_lambdas,
    lambda_signal_fn,
    make_signal_fn,
    profile_row,
    profile_signal_fn,
    prompt_rows,
    request_row,
)
from tests.helpers import make_config


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


@pytest.mark.parametrize("mode", ["ouro", "ouro_delayed", "random_lookahead"])
def test_unread_signals_are_not_drawn_and_change_nothing(mode: str) -> None:
    """At threshold 1 no decider reads a signal: the stream is 0.0, a run reading every gate
    back (atomic, readback_skip off) is the run of the drawn λ stream, and the settings are
    still checked."""
    exit_cfg = ExitConfig(mode=mode, exit_threshold=1.0)  # type: ignore[arg-type]
    fn = make_signal_fn(exit_cfg, TINY.num_depths, seed=3)
    assert fn is not None and {fn(f"r{i}", i, i % 4) for i in range(50)} == {0.0}
    drawn = lambda_signal_fn(stable_seed(3, mode), default_mean_lambdas(TINY.num_depths))
    cfg = make_config("atomic", max_num_seqs=4, max_num_batched_tokens=24,
                      prefill_chunk_size=16, exit=exit_cfg, readback_skip=False)
    wl = {"kind": "poisson", "num_requests": 30, "request_rate": 50.0,
          "prompt_tokens": {"dist": "uniform", "low": 4, "high": 40},
          "output_tokens": {"dist": "uniform", "low": 1, "high": 12}}
    reads: list[tuple[str, int, int]] = []

    def read(request_id: str, position: int, depth: int) -> float:
        reads.append((request_id, position, depth))
        return fn(request_id, position, depth)

    runs = [simulate(cfg, build_source(wl, seed=3, vocab_size=64),
                     make_cost_model("roofline", TINY), signal_fn=f, seed=3)
            for f in (read, drawn)]
    assert len(reads) > 100  # every gate is read back
    assert (runs[0].steps, runs[0].tokens) == (runs[1].steps, runs[1].tokens)
    with pytest.raises(ValueError, match="mean_lambdas"):
        make_signal_fn(exit_cfg, 4, seed=0, mean_lambdas=(0.5, 0.5))
