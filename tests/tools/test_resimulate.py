"""tools.resimulate: the profile as it is reproduces the fidelity run's own simulation (at
both speeds), and dropping a part changes what that part prices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.loopserve.test_fidelity import files, profile, result  # noqa: F401  (fixtures)
from tools.resimulate import resimulate, table


def test_as_is_reproduces_the_fidelity_runs_simulation(result: Path) -> None:  # noqa: F811
    doc = json.loads((result / "fidelity.json").read_text())
    out = resimulate(result, ["step_gap"])
    for speed, section in (("profile", doc["arms"]), ("run", doc["at_run_speed"]["arms"])):
        got = out["variants"][f"as is @ {speed} speed"]
        for arm, row in got.items():
            for metric in ("itl_p50_ms", "ttft_p50_ms"):
                assert row[metric]["sim"] == pytest.approx(section[arm][metric]["sim"], rel=1e-12)
                assert row[metric]["measured"] == section[arm][metric]["measured"]
    # without the host gap every step is shorter, so every arm's TTFT p50 drops
    without = out["variants"]["without step_gap @ profile speed"]
    for arm, row in without.items():
        assert row["ttft_p50_ms"]["sim"] < out["variants"]["as is @ profile speed"][arm][
            "ttft_p50_ms"]["sim"]
    assert "without step_gap @ run speed" in table(out)


def test_dropping_later_keeps_the_rest_of_after_idle() -> None:
    from sim.cost.after_idle import AfterIdle
    from sim.cost.profile import load_profile
    from tests.helpers import profile_doc, stage
    from tools.resimulate import _without

    doc = profile_doc("tiny", "cpu", {"decode": stage(1e-3)})
    doc["after_idle"] = {"idle_s": [0.1], "extra": {"prompt": [0.3]}, "later": [0.5]}
    prof = load_profile(doc)
    dropped = _without(prof, "after_idle.later").after_idle
    assert dropped == AfterIdle(idle_s=[0.1], extra={"prompt": [0.3]}, later=[])
    assert _without(prof, "after_idle").after_idle is None
    assert prof.after_idle is not None and prof.after_idle.later == [0.5]  # not mutated
