"""The measured world of a fidelity run: every planned run on the real target through a
``RecordingRunner``, with the calibration's reference probes timed before and after them.
Imported (with torch, through the real target and the calibration rig) only by
``loopserve fidelity``."""

from __future__ import annotations

from engine.realtime import run_realtime
from loopserve.calibrate.host_gap import RecordingRunner
from loopserve.calibrate.measure import CalibrationRig, config_for, time_probes
from loopserve.fidelity.world import RealWorld, WorldRun
from loopserve.plan import Plan, run_source
from loopserve.plan.sweep import SweepPoint
from loopserve.runs.loop import each_run
from loopserve.stats.metrics import summarize
from loopserve.targets import RunSpec
from loopserve.targets.real import RealTarget
from sim.cost.profile import Profile
from sim.cost.shape_grid import probe_shapes


def _probes(target: RealTarget, block_size: int) -> dict[str, float]:
    shape = target.model.config.to_shape()
    cfg = config_for(shape, list(probe_shapes(shape.num_depths).values()), block_size)
    rig = CalibrationRig(target.runner(cfg, 0), cfg)
    return time_probes(rig)


def run_real(plan: Plan, profile: Profile, *, progress: bool = True) -> RealWorld:
    """Every planned run on the real target (the plan's scenario carries the profile's CPU
    thread count, see ``loopserve.commands.fidelity``); a warm-up run first when the scenario
    asks for it (discarded); the calibration probes around it."""
    block_size = profile.provenance.block_size or 16
    target = RealTarget(plan.scenario, plan.target)
    probes: list[dict[str, float]] = []

    def one(point: SweepPoint, spec: RunSpec) -> WorldRun:
        # Batches come from the runner (signatures after the run), so the timed loop is the
        # one `loopserve run` times.
        runner = RecordingRunner(target.runner(spec.cfg, spec.seed))
        src = run_source(point.scenario, spec.seed, plan.shape)
        records = run_realtime(spec.cfg, src, runner)  # type: ignore[arg-type]
        return WorldRun(spec, records, runner.batches,
                        summarize(records, plan.shape.num_depths), runner.cpu_s)

    runs = each_run(plan, one, progress=progress,
                    after_warmup=lambda: probes.append(_probes(target, block_size)))
    return RealWorld(runs, probes[0], _probes(target, block_size))
