"""Capacity does not depend on the rate its search starts from: a mixed arm probed at a low
rate forms no mixed core call (invalid for comparing arms, RFC §6) and is still judged on its
metrics, so every start brackets the same boundary."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopserve.commands.capacity import FACTOR
from loopserve.runs.capacity import search_capacity
from loopserve.runs.capacity_probe import Criterion, prober
from loopserve.schema.load import validate
from tests.loopserve.test_capacity_cli import POISSON, SLO
from tests.scenario_fixtures import tiny

SCN = validate(tiny(workload=POISSON, repeats=1, arms=["mixed"]))
PROBE = prober(SCN, "mixed", "sim", Criterion(dict(SLO)))
_SEEN: dict[float, bool] = {}


def _meets(rate: float) -> bool:
    if rate not in _SEEN:
        _SEEN[rate] = PROBE(rate).meets
    return _SEEN[rate]




def test_an_invalid_low_rate_probe_meets_the_slo_and_says_why() -> None:
    row = PROBE(0.05)
    assert not row.valid and row.meets
    assert row.reason is not None and "not counted against the SLO" in row.reason
    assert "no mixed core call" in row.reason


# every start from which the bracketing reaches the boundary (start x or / 2**MAX_STEPS):
# down to rates where the mixed arm forms no mixed core call (~0.05 req/s here)
MAX_STEPS = 16
REACH = FACTOR ** (MAX_STEPS - 1)
REFERENCE = search_capacity(_meets, 20.0, tolerance=0.1, factor=FACTOR, max_steps=MAX_STEPS)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.floats(min_value=REFERENCE.high / REACH, max_value=REFERENCE.low * REACH))
def test_any_start_rate_gives_the_same_bracket(start: float) -> None:
    found = search_capacity(_meets, start, tolerance=0.1, factor=FACTOR, max_steps=MAX_STEPS)
    assert REFERENCE.status == found.status == "found"
    # both brackets hold the one boundary of a monotone probe: they overlap
    assert max(found.low, REFERENCE.low) < min(found.high, REFERENCE.high), (found, REFERENCE)
