"""The calibrated cost model's ``readback`` term: charged once per readback of a recurrent
step, as the roofline charges its ``readback_s``, in place of the ``signals`` model; a profile
without it (the checked-in one) loads and falls back to the ``signals`` model, saying so."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from engine.core import ExitConfig, Stage
from engine.core.batch import Batch, ItemKind, ScheduledItem
from engine.core.shapes import TINY
from sim import make_cost_model
from sim.cost.calibrated import CalibratedCost
from sim.cost.profile import load_profile
from tests.helpers import profile_doc, stage
from tests.sim.test_sim_driver import ARMS, readback_runs

READBACK_S = 7e-5
CPU_SMALL = Path(__file__).resolve().parents[2] / "results/profiles/cpu-small.json"


def _doc(readback: bool) -> dict[str, object]:
    stages = {k: stage(1e-4, rows=1e-6) for k in
              ("decode", "prompt", "mixed", "prefill", "prelude", "coda")}
    doc = profile_doc("tiny", "cpu", stages)
    doc["signals"] = stage(3e-6, signal_rows=2e-7)
    if readback:
        doc["readback"] = {"readback_s": READBACK_S}
    return doc


@pytest.mark.parametrize("arm", ARMS)
def test_readback_skip_off_costs_exactly_readbacks_times_the_term(arm: str) -> None:
    exit_cfg = ExitConfig(mode="ouro", exit_threshold=1.0)
    cost = CalibratedCost(_doc(readback=True), hardware="cpu", model="tiny")
    on, off = readback_runs(arm, exit_cfg, cost)
    extra = [(b.num_readbacks - a.num_readbacks) for a, b in zip(on, off, strict=True)]
    assert sum(extra) > 0 and all(n in (0, 1) for n in extra)
    for a, b, n in zip(on, off, extra, strict=True):
        assert (b.end_s - b.start_s) - (a.end_s - a.start_s) == pytest.approx(
            n * READBACK_S, abs=1e-12)


def _decode_step(needs_signal: bool, rows: int = 3) -> Batch:
    return Batch(0, Stage.RECURRENT, tuple(
        ScheduledItem(f"r{i}", 0, ItemKind.DECODE, 8, 1, 0, 1, needs_signal=needs_signal)
        for i in range(rows)))


def test_the_breakdown_names_the_readback_term_and_drops_the_signals_model() -> None:
    cost = CalibratedCost(_doc(readback=True))
    assert cost.readback_note is None and cost.readback_s == READBACK_S
    off, on = cost.breakdown(_decode_step(True)), cost.breakdown(_decode_step(False))
    assert off["readback_s"] == READBACK_S and on["readback_s"] == 0.0
    assert "signals_s" not in off
    assert off["total_s"] - on["total_s"] == pytest.approx(READBACK_S, abs=1e-15)
    old = CalibratedCost(_doc(readback=False))  # the fallback: the signals model charges it
    assert old.breakdown(_decode_step(True))["signals_s"] == pytest.approx(3e-6 + 3 * 2e-7)


def test_a_profile_without_the_term_falls_back_to_the_signals_model_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    prof = load_profile(CPU_SMALL)  # the checked-in profile, measured without the term
    assert prof.readback is None and prof.signals is not None
    cost = CalibratedCost(_doc(readback=False))
    assert cost.readback_s is None and "no readback term" in (cost.readback_note or "")
    with caplog.at_level(logging.WARNING):
        make_cost_model("calibrated", TINY, hardware="cpu", profile=_doc(readback=False),
                        model_name="tiny")
    assert any("no readback term" in r.getMessage() for r in caplog.records)


def test_a_negative_readback_term_is_refused() -> None:
    doc = _doc(readback=True)
    doc["readback"] = {"readback_s": -1e-6}
    with pytest.raises(ValueError, match="readback"):
        load_profile(doc)
