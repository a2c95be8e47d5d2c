"""One calibration: build the model, measure shapes and host gaps, fit, make the profile.

Torch is imported here; the CLI (``loopserve.commands.calibrate``) validates flags and
writes files.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import time
from dataclasses import replace
from pathlib import Path

import torch

from engine.core.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.llm import build_runner
from engine.model.alloc import default_dtype
from engine.model.build import build_model
from engine.realtime import run_realtime
from loopserve.calibrate.adaptive_costs import extra_cases, measure_extras
from loopserve.calibrate.after_idle import (
    PAUSES_S,
    QUICK_PAUSES_S,
    idle_seconds,
    measure_after_idle,
)
from loopserve.calibrate.host_gap import (
    RecordingRunner,
    execute_samples,
    gap_samples,
    gap_workload,
    trim_outliers,
)
from loopserve.calibrate.measure import (
    CalibrationRig,
    config_for,
    measure_shapes,
    time_probes,
)
from loopserve.calibrate.readback import measure_readback, readback_rounds, readback_shapes
from loopserve.calibrate.result import CalibrationResult
from loopserve.outputs.env_info import commit_label
from sim.cost.features import STEP_KINDS, batch_features
from sim.cost.fit import (
    Sample,
    fit_profile_stages,
    fit_stage,
    pooled_held_out,
)
from sim.cost.profile import PROFILE_FORMAT, Profile, Provenance, ReadbackTerm
from sim.cost.resolve import model_label
from sim.cost.shape_grid import QUICK, GridSpec, probe_shapes, shape_grid

# Share of the time budget for the forced shapes; the rest goes to the host-gap runs.
_SHAPES_SHARE = 0.8


def hardware_name(device: torch.device) -> str:
    """``cpu``, or the GPU's short name: "NVIDIA H200" -> ``h200``, "NVIDIA A100-SXM4-80GB" ->
    ``a100``, "NVIDIA GeForce RTX 4090" -> ``rtx4090``."""
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower()
    words = [w for w in re.split(r"[\s_]+", name) if w not in ("nvidia", "geforce", "tesla")]
    if len(words) >= 2 and words[0] in ("rtx", "gtx", "titan"):
        words = [words[0] + words[1]]
    first = re.split(r"[-/]", words[0])[0] if words else "gpu"
    return re.sub(r"[^a-z0-9.]", "", first) or "gpu"


def gpu_hardware() -> str | None:
    """This machine's GPU as a profile names it (``hardware_name``), or None without CUDA."""
    return hardware_name(torch.device("cuda")) if torch.cuda.is_available() else None


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cpus)"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gap_runs(model: object, shape_cfg: EngineConfig, device: torch.device, dtype: torch.dtype,
              *, quick: bool, backend: str, seed: int,
              output_tokens: int) -> tuple[list[Sample], list[Sample]]:
    """Short closed runs of every arm: host-gap samples and in-situ execute samples."""
    decoders, chunk = (3, 16) if quick else (8, 64)
    gaps: list[Sample] = []
    in_situ: list[Sample] = []
    for arm in ("atomic", "per_depth", "mixed"):
        cfg = EngineConfig(
            model=shape_cfg.model,
            scheduler=SchedulerConfig(arm=arm, max_num_seqs=decoders + 2,
                                      prefill_chunk_size=chunk,
                                      max_num_batched_tokens=2 * chunk),
            cache=CacheConfig(num_blocks=64 * (decoders + 2) * shape_cfg.model.num_depths,
                              block_size=shape_cfg.cache.block_size),
        )
        source = gap_workload(cfg, decoders=decoders, prompt_tokens=chunk // 2,
                              output_tokens=output_tokens, long_prompt=3 * chunk, seed=seed)
        runner = RecordingRunner(build_runner(model, cfg, device, dtype, seed,  # type: ignore[arg-type]
                                              backend))
        records = run_realtime(cfg, source, runner, record_batches=False)  # type: ignore[arg-type]
        gaps += gap_samples(records, runner.batches, arm)
        in_situ += execute_samples(runner.batches, runner.execute_s, arm)
    return gaps, in_situ


def _gap_tokens(samples: list[Sample], cfg: EngineConfig, quick: bool, left_s: float) -> int:
    """Output tokens per request of the host-gap runs: 48, fewer when the rest of the time
    budget would not hold three runs (a token costs about D + 2 decode-sized steps)."""
    if quick:
        return 6
    decode = sorted(s.seconds for s in samples if s.kind == "decode")
    step_s = decode[len(decode) // 2] if decode else 0.01
    per_token = (cfg.model.num_depths + 2) * step_s
    return int(min(48, max(8, left_s / 3 / per_token)))


def calibrate(
    *, target: str, model: str, repeats: int, max_seconds: float, quick: bool = False,
    threads: int = 1, block_size: int = 16, backend: str = "torch", seed: int = 0,
    progress: bool = True, command: list[str] | None = None, allocator: str | None = None,
) -> CalibrationResult:
    """Measure and fit. Raises ValueError("model: ...") for an unknown model. The CPU thread
    count is set for the measurement and restored afterwards."""
    before = torch.get_num_threads()
    try:
        return _calibrate(target=target, model=model, repeats=repeats, max_seconds=max_seconds,
                          quick=quick, threads=threads, block_size=block_size, backend=backend,
                          seed=seed, progress=progress, command=command, allocator=allocator)
    finally:
        torch.set_num_threads(before)


def _calibrate(
    *, target: str, model: str, repeats: int, max_seconds: float, quick: bool, threads: int,
    block_size: int, backend: str, seed: int, progress: bool, command: list[str] | None,
    allocator: str | None,
) -> CalibrationResult:
    device = torch.device(target)
    if device.type == "cpu":
        torch.set_num_threads(threads)
    dtype = default_dtype(device)
    net = build_model(model, seed=seed, device=device, dtype=dtype)
    model_shape = net.config.to_shape()
    spec = replace(QUICK if quick else GridSpec(), num_depths=model_shape.num_depths)
    shapes = shape_grid(spec, seed=seed + 1)
    probes = probe_shapes(model_shape.num_depths)
    cfg = config_for(model_shape, [*shapes, *probes.values()], block_size)
    started = time.perf_counter()
    runner = build_runner(net, cfg, device, dtype, seed, backend)
    rig = CalibrationRig(runner, cfg, seed)
    pauses, idle_rounds = (QUICK_PAUSES_S, 2) if quick else (PAUSES_S, max(5, repeats + 2))
    probe_before = time_probes(rig, repeats=3 if quick else 9)
    # The waits of the after-idle measurement come out of the budget first: they are fixed.
    shapes_s = max(0.2 * max_seconds, max_seconds - idle_seconds(pauses, idle_rounds))
    measured = measure_shapes(rig, shapes, repeats=repeats, seed=seed, progress=progress,
                              max_seconds=_SHAPES_SHARE * shapes_s)
    extras = measure_extras(rig, extra_cases(model_shape.num_depths, quick),
                            rounds=max(3, 2 * repeats), seed=seed)
    rb_shapes = readback_shapes(model_shape.num_depths, quick)
    readback_s, readback_rows_s = measure_readback(rig, rb_shapes, rounds=readback_rounds(quick),
                                                   seed=seed)
    idle = measure_after_idle(rig, pauses_s=pauses, rounds=idle_rounds, seed=seed)
    probe_after = time_probes(rig, repeats=3 if quick else 9)
    del rig, runner
    samples = [Sample(m.shape.kind, batch_features(m.batch), m.median_s, m.shape.held_out,
                      m.shape.label) for m in measured]
    gaps, in_situ = _gap_runs(net, cfg, device, dtype, quick=quick, backend=backend, seed=seed,
                              output_tokens=_gap_tokens(samples, cfg, quick, max_seconds
                                                        - (time.perf_counter() - started)))
    stages = fit_profile_stages(samples, STEP_KINDS)
    gap = fit_stage("step_gap", trim_outliers(gaps), relative=False) if gaps else None
    extra_fits = {k: r for k in ("signals", "finalize")
                  if (r := fit_stage(k, extras, relative=False)) is not None}
    mape, worst = pooled_held_out(stages)
    contended = sum(len(m.contended) for m in measured)
    timed = contended + sum(len(m.times_s) for m in measured)
    elapsed = time.perf_counter() - started
    prov = Provenance(
        device=device_name(device), torch_version=torch.__version__,
        dtype=str(dtype).removeprefix("torch."), commit=commit_label(),
        date=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        held_out_mape=mape, held_out_max_error=worst,
        held_out_mape_by_stage={k: r.held_out_mape for k, r in stages.items()
                                if r.held_out_mape is not None},
        num_threads=torch.get_num_threads() if device.type == "cpu" else None,
        block_size=block_size, attention_backend=backend,
        num_fit_shapes=sum(not m.shape.held_out for m in measured),
        num_held_out_shapes=sum(m.shape.held_out for m in measured),
        repeats=min(len(m.times_s) for m in measured), seconds=round(elapsed, 1),
        contended_fraction=round(contended / max(1, timed), 4),
        probe_s={k: 0.5 * (probe_before[k] + probe_after[k]) for k in probe_before},
        command=command, allocator=allocator,
    )
    profile = Profile(
        format=PROFILE_FORMAT, hardware=hardware_name(device), model=model_label(model),
        provenance=prov, stages={k: r.fit for k, r in stages.items()},  # type: ignore[misc]
        step_gap=gap.fit if gap is not None else None,
        signals=extra_fits["signals"].fit if "signals" in extra_fits else None,
        finalize=extra_fits["finalize"].fit if "finalize" in extra_fits else None,
        after_idle=idle.after_idle,
        readback=ReadbackTerm(readback_s=readback_s, rows=[len(s.decode) for s in rb_shapes],
                              per_rows_s=readback_rows_s),
    )
    return CalibrationResult(profile, stages, gap, samples, gaps, in_situ, elapsed,
                             extras, extra_fits, idle)
