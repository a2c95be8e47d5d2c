"""Exit deciders against hand-computed cases (docs/design.md)."""

import math

import pytest

from engine.core.config import ExitConfig
from engine.core.exits import make_decider, validate_trace


def run_token(decider, signals, max_depth=4):
    """Feed signals depth by depth; return (exit loops, signals consumed)."""
    decider.start_token(1)
    consumed = 0
    for depth in range(max_depth):
        sig = None
        if decider.needs_signal(depth):
            sig = signals[depth]
            consumed += 1
        if decider.after_depth(depth + 1, sig):
            return depth + 1, consumed
    raise AssertionError("never exited")


def test_constant_half_hazard_cdf_and_thresholds() -> None:
    # λ = 0.5 at every loop: CDF 0.5, 0.75, 0.875, (1.0)
    lam = [0.5] * 4
    for q, expected in [(0.5, 1), (0.6, 2), (0.75, 2), (0.8, 3), (0.875, 3), (0.9, 4)]:
        d = make_decider(ExitConfig(mode="ouro", exit_threshold=q), 4, request_key="r")
        assert run_token(d, lam)[0] == expected, q


def test_worked_example_from_reference() -> None:
    lam = [0.2, 0.5, 0.7, 0.9]  # p = 0.2, 0.4, 0.28, 0.12; C = 0.2, 0.6, 0.88, 1.0
    for q, expected in [(0.5, 2), (0.9, 4), (0.88, 3)]:
        d = make_decider(ExitConfig(mode="ouro", exit_threshold=q), 4, request_key="r")
        assert run_token(d, lam)[0] == expected


def test_threshold_one_never_exits_early_even_if_lambda_is_one() -> None:
    d = make_decider(ExitConfig(mode="ouro", exit_threshold=1.0), 4, request_key="r")
    assert run_token(d, [1.0] * 4) == (4, 0)  # no signal read at all
    d = make_decider(ExitConfig(mode="ouro_delayed", exit_threshold=1.0), 4, request_key="r")
    assert run_token(d, [1.0] * 4) == (4, 0)


def test_min_loops_still_accumulates_and_last_gate_ignored() -> None:
    # hazard 0.4 with threshold 0.6 -> CDF 0.4, 0.64: exits at 2 (seed notes example)
    d = make_decider(ExitConfig(mode="ouro", exit_threshold=0.6), 4, request_key="r")
    assert run_token(d, [0.4] * 4) == (2, 2)
    # min_loops 3: CDF crossed at loop 1 already, exit at 3 (loops before min still count)
    d = make_decider(ExitConfig(mode="ouro", exit_threshold=0.3, min_loops=3), 4, request_key="r")
    assert run_token(d, [0.4] * 4) == (3, 3)
    # last loop's gate never read: 3 signals at most for D=4
    d = make_decider(ExitConfig(mode="ouro", exit_threshold=0.99), 4, request_key="r")
    assert run_token(d, [0.0] * 4) == (4, 3)


def test_ouro_delayed_exits_one_loop_after_crossing() -> None:
    # hazards 0.3, 0.3 -> CDF 0.51; threshold 0.5 min 2: ouro exits at 2, delayed at 3
    cfg = dict(exit_threshold=0.5, min_loops=2)
    d = make_decider(ExitConfig(mode="ouro", **cfg), 4, request_key="r")
    assert run_token(d, [0.3] * 4)[0] == 2
    d = make_decider(ExitConfig(mode="ouro_delayed", **cfg), 4, request_key="r")
    assert run_token(d, [0.3] * 4) == (3, 2)


def test_random_lookahead_means_one_more_loop() -> None:
    d = make_decider(ExitConfig(mode="random_lookahead", exit_threshold=0.5), 4, request_key="r")
    assert run_token(d, [0.9, 0.0, 0.0, 0.0]) == (2, 1)
    assert run_token(d, [0.1, 0.9, 0.0, 0.0]) == (3, 2)
    assert run_token(d, [0.1, 0.1, 0.9, 0.9]) == (4, 2)  # cannot read the last two
    d = make_decider(
        ExitConfig(mode="random_lookahead", exit_threshold=0.5, min_loops=3), 4, request_key="r"
    )
    assert run_token(d, [0.9, 0.9, 0.0, 0.0])[0] == 3


def test_max_loops_caps_every_mode() -> None:
    for mode in ("fixed", "ouro", "ouro_delayed", "random_lookahead"):
        d = make_decider(ExitConfig(mode=mode, exit_threshold=0.99, max_loops=2), 4,
                         request_key="r")
        assert run_token(d, [0.0] * 4)[0] == 2, mode


def test_trace_and_categorical() -> None:
    d = make_decider(ExitConfig(mode="trace"), 4, request_key="r", trace=[4, 2, 1, 3])
    for index, expected in [(1, 2), (2, 1), (3, 3)]:
        d.start_token(index)
        loops = next(n for n in range(1, 5) if d.after_depth(n, None))
        assert loops == expected
    cfg = ExitConfig(mode="categorical", probs=(0.0, 1.0, 0.0, 0.0))
    d = make_decider(cfg, 4, request_key="r")
    assert run_token(d, [0.0] * 4) == (2, 0)
    # same key, same draws; a different key gives a different stream
    probs = (0.25, 0.25, 0.25, 0.25)
    draws = []
    for key in ("a", "a", "b"):
        d = make_decider(ExitConfig(mode="categorical", probs=probs), 4, request_key=key)
        draws.append([run_token(d, [0.0] * 4)[0] for _ in range(30)])
    assert draws[0] == draws[1] and draws[0] != draws[2]
    assert math.isclose(sum(draws[0]) / 30, 2.5, abs_tol=0.8)


def test_trace_validation() -> None:
    cfg = ExitConfig(mode="trace")
    validate_trace([4, 1, 2], cfg, 4, 3, "r")
    with pytest.raises(ValueError, match="exit_trace.*max_tokens"):
        validate_trace([4, 1], cfg, 4, 3, "r")
    with pytest.raises(ValueError, match="first token"):
        validate_trace([3, 1, 2], cfg, 4, 3, "r")
    with pytest.raises(ValueError, match="outside"):
        validate_trace([4, 5, 2], cfg, 4, 3, "r")


def test_bad_exit_config_names_the_field() -> None:
    with pytest.raises(ValueError, match="exit.mode"):
        ExitConfig(mode="bogus")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exit.probs"):
        ExitConfig(mode="categorical", probs=(0.5, 0.4))
    with pytest.raises(ValueError, match="exit.max_loops"):
        ExitConfig(min_loops=3, max_loops=2)
    with pytest.raises(ValueError, match="exceeds the model"):
        ExitConfig(max_loops=5).resolved_max_loops(4)
