"""`loopserve calibrate` end to end on the tiny model (CPU), the forced-shape rig, and bad
input (one line, exit 2, nothing written)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from engine.core.results import step_kind
from engine.core.shapes import TINY
from engine.host_allocator import steady_allocator
from engine.llm import build_runner
from loopserve.calibrate import measure
from loopserve.calibrate.measure import CalibrationRig, config_for, measure_shapes
from loopserve.cli import main
from sim.cost.features import batch_features
from sim.cost.profile import load_profile
from sim.cost.shape_grid import QUICK, Shape, shape_grid, shape_of

KINDS = {"decode", "prompt", "mixed", "prefill", "prelude", "coda", "decode_after_prompt"}
QUICK_ARGS = ["--target", "cpu", "--model", "tiny", "--quick", "--repeats", "2",
              "--max-seconds", "30", "--no-progress"]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "run"
    # Deterministic on a loaded machine: no sample counts as contended (a shape with only
    # contended samples would report repeats 0), and the time budget is far away.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(measure, "contended", lambda wall, cpu: False)
        args = [a if a != "30" else "600" for a in QUICK_ARGS]
        assert main(["calibrate", *args, "--out", str(out)]) == 0
    return out


def test_quick_calibration_writes_a_valid_profile(calibrated: Path) -> None:
    assert {p.name for p in calibrated.iterdir()} == {"cpu-tiny.json", "env.json", "steps.csv",
                                                      "cpu-tiny.exits.json"}
    prof = load_profile(calibrated / "cpu-tiny.json")
    assert (prof.hardware, prof.model) == ("cpu", "tiny")
    assert set(prof.stages) == KINDS
    assert prof.step_gap is not None
    p = prof.provenance
    assert p.dtype == "float32" and p.torch_version == torch.__version__
    assert p.num_threads == 1 and p.block_size == 16
    assert p.held_out_mape is not None and p.held_out_mape >= 0
    assert set(p.held_out_mape_by_stage or {}) == KINDS
    assert p.num_held_out_shapes == sum(QUICK.held_out_per_kind.values()) + QUICK.held_out_per_kind[
        "decode"]  # the held-out decode shapes are also timed after a prompt step
    assert p.repeats == 2 and p.contended_fraction == 0
    assert set(p.probe_s or {}) == {"decode_small", "decode_large", "prompt"}
    assert p.allocator == steady_allocator()  # the settings the measurement ran under
    env = json.loads((calibrated / "env.json").read_text())
    assert env["command"][:2] == ["loopserve", "calibrate"] and env["num_threads"] == 1
    with (calibrated / "steps.csv").open() as f:
        rows = list(csv.DictReader(f))
    shapes = [r for r in rows if r["source"] == "shape"]
    assert len(shapes) == len(shape_grid(QUICK))
    assert {r["kind"] for r in shapes} == KINDS
    assert {r["source"] for r in rows} == {"shape", "host_gap", "in_situ", "extra"}
    extra = [r for r in rows if r["source"] == "extra"]
    assert {r["kind"] for r in extra} == {"signals", "finalize"}
    assert all(float(r["measured_s"]) > 0 and r["predicted_s"] for r in extra)
    # the adaptive-exit extras: fitted, and at least their fixed part costs something
    assert prof.signals is not None and prof.finalize is not None
    assert prof.finalize.predict({"finalize_copies": 1.0}) > 0
    # the readback term: readback_skip off against on over the same decode steps
    assert prof.readback is not None
    assert math.isfinite(prof.readback.readback_s) and prof.readback.readback_s >= 0
    assert prof.readback.rows == [1, 4] and len(prof.readback.per_rows_s or []) == 2
    assert all(float(r["measured_s"]) > 0 and r["predicted_s"] for r in shapes)
    # the first step after a wait: measured at the quick waits, never below warm
    assert prof.after_idle is not None and prof.after_idle.idle_s == [0.02, 0.2]
    assert set(prof.after_idle.extra) == {"prompt", "prefill", "decode"}
    assert all(len(v) == 2 and min(v) >= 0 for v in prof.after_idle.extra.values())
    assert len(prof.after_idle.later) in (0, 3) and min(prof.after_idle.later, default=0) >= 0


def test_json_out_writes_the_profile_and_its_side_files(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "mine.json"
    assert main(["calibrate", *QUICK_ARGS, "--max-seconds", "5", "--out", str(out)]) == 0
    assert load_profile(out).model == "tiny"
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "mine.env.json", "mine.exits.json", "mine.json", "mine.steps.csv"]


def test_rig_builds_batches_that_reproduce_their_shapes() -> None:
    shapes = shape_grid(QUICK)
    cfg = config_for(TINY, shapes)
    rig = CalibrationRig(build_runner("tiny", cfg), cfg)
    for shape in shapes:
        batch, live = rig.build(shape)
        try:
            # a decode call timed after a prompt step is still a decode call
            assert step_kind(batch) == shape.kind.removesuffix("_after_prompt")
            again = shape_of(batch)
            assert (again.decode, again.prompts, again.rows) == (
                shape.decode, shape.prompts, shape.rows)
            rig.runner.execute(batch)
        finally:
            rig.release(live)
    assert rig.kv.num_free_blocks == cfg.cache.num_blocks  # every request freed
    measured = measure_shapes(rig, shapes[:6], repeats=2, progress=False)
    assert all(m.median_s > 0 and len(m.times_s) + len(m.contended) >= 2 for m in measured)
    assert batch_features(measured[0].batch)["decode_rows"] == len(shapes[0].decode)


@pytest.mark.parametrize(
    "args, field",
    [
        (["--target", "tpu", "--model", "tiny"], "--target"),
        (["--target", "cpu", "--model", "tiny", "--repeats", "0"], "--repeats"),
        (["--target", "cpu", "--model", "tiny", "--repeats", "many"], "--repeats"),
        (["--target", "cpu", "--model", "tiny", "--max-seconds", "-1"], "--max-seconds"),
        (["--target", "cpu", "--model", "tiny", "--threads", "0"], "--threads"),
        (["--target", "cpu", "--model", "no-such-model", "--quick"], "model"),
        (["--target", "cpu", "--model", "tiny", "--attention-backend", "nope"],
         "--attention-backend"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], field: str) -> None:
    out = tmp_path / "never.json"
    assert main(["calibrate", *args, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"loopserve: error: {field}") and "\n" not in err
    assert "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_out_folder_that_is_not_empty_is_rejected(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "keep.txt").write_text("x")
    assert main(["calibrate", *QUICK_ARGS, "--out", str(tmp_path)]) == 2
    assert "--out" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_without_a_gpu_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--target", "cuda", "--model", "tiny", "--quick"]) == 2
    assert "--target" in capsys.readouterr().err


@pytest.mark.parametrize("name, short", [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA GeForce RTX 4090", "rtx4090"),
])
def test_gpu_short_names(monkeypatch: pytest.MonkeyPatch, name: str, short: str) -> None:
    from loopserve.calibrate.job import hardware_name

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert hardware_name(torch.device("cuda")) == short
    assert hardware_name(torch.device("cpu")) == "cpu"


def test_decode_after_prompt_is_timed_after_a_prompt_step() -> None:
    from loopserve.calibrate.measure import AFTER_PROMPT_CHUNK, AFTER_PROMPT_PREFIX, _predecessor

    after = [s for s in shape_grid(QUICK) if s.kind == "decode_after_prompt"]
    assert after and {s.decode for s in after} <= {
        s.decode for s in shape_grid(QUICK) if s.kind == "decode"}
    before = _predecessor(after[0], 4)
    assert before is not None and before.kind == "prompt"
    assert [(p.prefix, p.chunk, p.depth) for p in before.prompts] == [
        (AFTER_PROMPT_PREFIX, AFTER_PROMPT_CHUNK, 1)]
    assert _predecessor(Shape("decode", decode=after[0].decode), 4) is None  # timed warm


def test_a_checkpoint_with_three_depths_is_measured_at_its_own_depths(tmp_path: Path) -> None:
    """The grid, the probes and the untimed predecessors follow the model's D: a CODA step
    follows the rows' last depth (2 here), and no shape names a depth the model lacks."""
    import re

    from engine.model.alloc import empty_model
    from engine.model.build import init_random_weights
    from engine.model.loader import save_checkpoint
    from engine.model.presets import get_preset
    from loopserve.calibrate.measure import _predecessor
    from sim.cost.shape_grid import probe_shapes

    cfg = get_preset("tiny").replace(total_ut_steps=3)
    save_checkpoint(init_random_weights(empty_model(cfg, "cpu", torch.float32), 0),
                    tmp_path / "ckpt")
    out = tmp_path / "cal"
    args = [a if a != "tiny" else str(tmp_path / "ckpt") for a in QUICK_ARGS]
    assert main(["calibrate", *args, "--out", str(out)]) == 0
    with (out / "steps.csv").open() as f:
        labels = [r["label"] for r in csv.DictReader(f) if r["source"] == "shape"]
    depths = {int(d) for lab in labels for group in re.findall(r"@\[([\d, ]+)\]", lab)
              for d in group.split(",")}
    depths |= {int(d) for lab in labels for d in re.findall(r"\+\d+@(\d+)", lab)}
    assert depths == {0, 1, 2}
    coda = _predecessor(Shape("coda", rows=2), 3)
    assert coda is not None and {r.depth for r in coda.decode} == {2}
    probes = probe_shapes(3).values()
    assert {r.depth for p in probes for r in p.decode} | {c.depth for p in probes
                                                          for c in p.prompts} == {0, 1, 2}


def test_rig_batches_run_every_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner drops items whose request its core does not know (live_items); the rig's
    synthetic requests must be known, or calibration and fidelity's probes time empty
    batches (about 5 us)."""
    shapes = shape_grid(QUICK)
    cfg = config_for(TINY, shapes)
    rig = CalibrationRig(build_runner("tiny", cfg), cfg)
    ran: list[int] = []
    inner = rig.runner._run
    monkeypatch.setattr(rig.runner, "_run", lambda b: ran.append(len(b.items)) or inner(b))
    for shape in shapes:
        batch, live = rig.build(shape)
        try:
            rig.runner.execute(batch)
        finally:
            rig.release(live)
        assert ran[-1] == len(batch.items) > 0, shape
    assert not rig.core.requests  # released with their KV


def test_the_after_idle_waits_come_out_of_the_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from loopserve.calibrate import job
    from loopserve.calibrate.after_idle import PAUSES_S, idle_seconds

    seen: dict[str, float] = {}

    class Stop(Exception):
        pass

    def capture(*args: object, max_seconds: float, **kw: object) -> None:
        seen["max_seconds"] = max_seconds
        raise Stop

    monkeypatch.setattr(job, "measure_shapes", capture)
    with pytest.raises(Stop):
        job.calibrate(target="cpu", model="tiny", repeats=5, max_seconds=120.0, progress=False)
    waits = idle_seconds(PAUSES_S, 7)
    assert waits > 10
    assert seen["max_seconds"] == pytest.approx(job._SHAPES_SHARE * (120.0 - waits))


def test_calibration_measures_the_exit_profile_a_simulation_then_reads(
    calibrated: Path,
) -> None:
    # calibrate, then simulate adaptive exits: measured gates, not the synthetic stream
    from loopserve.plan.exit_source import exit_source
    from loopserve.schema.build import model_shape
    from loopserve.schema.load import validate
    from sim.exit_profile import load_exit_profile
    from tests.scenario_fixtures import tiny

    exits = load_exit_profile(calibrated / "cpu-tiny.exits.json")
    assert exits.model == "tiny" and exits.provenance.num_tokens > 0
    assert [r.label.split()[0] for r in exits.regimes or ()] == [
        f"ouro@{t}" for t in (0.5, 0.6, 0.7, 0.8, 0.9)]
    scn = validate(tiny(cost={"kind": "calibrated", "profile": str(calibrated / "cpu-tiny.json")},
                        exit={"mode": "ouro", "exit_threshold": 0.8}, hardware="cpu"))
    src = exit_source(scn, model_shape("tiny"), [scn.seed])
    assert (src.kind, src.via, src.unmeasured) == ("profile", "cost.profile", False)
