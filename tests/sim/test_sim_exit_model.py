"""Synthetic gate signals: deterministic, keyed by (request, position, depth), centred on the
configured per-depth λ."""

from __future__ import annotations

import statistics

import pytest

from engine.core import ExitConfig
from sim.exit_model import lambda_signal_fn, make_signal_fn


@pytest.mark.parametrize("mode", ["fixed", "trace"])
def test_core_decided_modes_need_no_signal(mode: str) -> None:
    assert make_signal_fn(ExitConfig(mode=mode), 4, seed=0) is None  # type: ignore[arg-type]
    cat = ExitConfig(mode="categorical", probs=(0.1, 0.2, 0.3, 0.4))
    assert make_signal_fn(cat, 4, seed=0) is None


@pytest.mark.parametrize("mode", ["ouro", "ouro_delayed", "random_lookahead"])
def test_signal_modes_get_a_deterministic_stream(mode: str) -> None:
    cfg = ExitConfig(mode=mode, exit_threshold=0.5)  # type: ignore[arg-type]
    f, g = make_signal_fn(cfg, 4, seed=1), make_signal_fn(cfg, 4, seed=1)
    h = make_signal_fn(cfg, 4, seed=2)
    assert f is not None and g is not None and h is not None
    keys = [(f"r{i}", p, d) for i in range(5) for p in range(5) for d in range(4)]
    assert [f(*k) for k in keys] == [g(*k) for k in keys]
    assert [f(*k) for k in keys] != [h(*k) for k in keys]
    assert all(0.0 <= f(*k) <= 1.0 for k in keys)


def test_lambda_is_logit_normal_around_the_per_depth_mean() -> None:
    means = (0.1, 0.5, 0.8, 0.95)
    f = lambda_signal_fn(7, means, sigma=0.5)
    for d, m in enumerate(means):
        draws = [f(f"r{i}", i % 13, d) for i in range(4000)]
        assert statistics.median(draws) == pytest.approx(m, abs=0.02)
    narrow = lambda_signal_fn(7, means, sigma=0.0)
    assert narrow("x", 3, 1) == pytest.approx(0.5) and narrow("x", 3, 9) == pytest.approx(0.95)
    edge = lambda_signal_fn(7, (0.0, 1.0), sigma=2.0)
    assert (edge("x", 0, 0), edge("x", 0, 1)) == (0.0, 1.0)


def test_bad_lambda_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="mean_lambdas"):
        make_signal_fn(ExitConfig(mode="ouro", exit_threshold=0.5), 4, seed=0,
                       mean_lambdas=(0.5, 0.5))
    with pytest.raises(ValueError, match="mean_lambdas"):
        lambda_signal_fn(0, (1.5,))
