"""``loopserve calibrate``: measure the real runner on forced shapes and write a profile.

    loopserve calibrate --target cpu|cuda --model PRESET_OR_DIR [--out FILE.json|DIR]
                        [--max-seconds S] [--repeats N] [--quick] [--threads N]

Default output: ``results/profiles/<hardware>-<model>.json`` (hardware ``cpu`` or the GPU's
short name, e.g. ``h200``) with ``<stem>.env.json`` and ``<stem>.steps.csv`` (every measured
shape and host gap: features, measured median, prediction) beside it. ``--out X.json`` writes
those files there instead; ``--out DIR`` writes ``DIR/<hardware>-<model>.json``,
``DIR/env.json`` and ``DIR/steps.csv`` into a new folder. Beside the profile, its exit profile
``<stem>.exits.json`` (``loopserve.calibrate.exits.calibration_exit_profile``: the gates of
generated prompts at full depth and under ouro@0.5-0.9), which a simulation of adaptive exits
on this cost profile reads. Files appear complete or not at all.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from engine.host_allocator import steady_allocator
from loopserve.calibrate.result import CalibrationResult
from loopserve.commands import command_help
from loopserve.commands.args import integer, number, real_target
from loopserve.errors import UserError
from loopserve.outputs import env_info
from loopserve.outputs.files import atomic_write_all, check_writable, staged_dir, write_json
from loopserve.runs import interrupts
from loopserve.targets.load import check_real
from sim.cost.features import FEATURE_NAMES
from sim.cost.fit import Sample
from sim.cost.profile import profile_json
from sim.cost.resolve import PROFILES_DIR
from sim.exit_profile import exit_profile_json

DEFAULT_MAX_SECONDS = 60.0
DEFAULT_REPEATS = 5


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``calibrate`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("calibrate", help=command_help("calibrate"))
    p.add_argument("--target", required=True, help="cpu | cuda")
    p.add_argument("--model", required=True, help="model preset name or checkpoint directory")
    p.add_argument("--out", help="profile file (*.json) or a new folder (default "
                   "results/profiles/<hardware>-<model>.json)")
    p.add_argument("--max-seconds", default=str(DEFAULT_MAX_SECONDS),
                   help=f"measuring time budget, model build excluded (default "
                   f"{DEFAULT_MAX_SECONDS:g}); repeats are cut to fit")
    p.add_argument("--repeats", default=str(DEFAULT_REPEATS),
                   help=f"timed repeats per shape, each after untimed warm-up runs "
                        f"(default {DEFAULT_REPEATS})")
    p.add_argument("--quick", action="store_true", help="a small grid (tests, dry runs)")
    p.add_argument("--threads", default="1",
                   help="CPU only: torch intra-op threads (default 1: steadier on shared "
                   "machines; fidelity runs with the profile's count)")
    p.add_argument("--block-size", default="16", help="KV block size (default 16)")
    p.add_argument("--attention-backend", default="auto",
                   help="attention backend: auto (triton on cuda, torch on cpu), torch, triton")
    p.add_argument("--seed", default="0", help="weights and shape-order seed (default 0)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Validate flags, measure, fit, write; UserError on bad input (exit 2 by the CLI)."""
    started = time.time()
    real_target(args.target)
    max_s = number("--max-seconds", args.max_seconds, 1.0, allow_inf=True,
                   fix="e.g. --max-seconds 60")
    repeats = integer("--repeats", args.repeats, 1, "e.g. --repeats 5")
    threads = integer("--threads", args.threads, 1, "e.g. --threads 1")
    block = integer("--block-size", args.block_size, 1, "e.g. --block-size 16")
    seed = integer("--seed", args.seed, 0, "e.g. --seed 0")
    out = Path(args.out) if args.out else None
    if out is not None and out.suffix != ".json" and out.exists() and (
            not out.is_dir() or any(out.iterdir())):
        raise UserError("--out", f"{out} exists and is not an empty folder; pick a new folder "
                        "or a .json file")
    if out is not None and out.suffix == ".json" and out.is_dir():
        raise UserError("--out", f"{out} is a folder; name a .json file or a new folder")
    check_writable(out or PROFILES_DIR / "x.json", "--out")  # before the measuring
    check_real(args.target)
    # Lazy: the backends and the calibration load torch, which only this command needs.
    with interrupts.importing():
        from kernels.attention import get_backend, resolve_backend
        from loopserve.calibrate.exits import calibration_exit_profile
        from loopserve.calibrate.job import calibrate

    backend = resolve_backend(args.attention_backend, args.target)  # auto: what will run

    try:
        get_backend(backend)
    except ValueError as err:
        raise UserError("--attention-backend", str(err).split(": ", 1)[-1]) from None
    allocator = steady_allocator()  # before any tensor: the real loop runs the same way
    try:
        result = calibrate(target=args.target, model=args.model, repeats=repeats,
                           max_seconds=max_s, quick=args.quick, threads=threads,
                           block_size=block, backend=backend, seed=seed,
                           progress=not args.no_progress, command=argv,
                           allocator=allocator)
        exits = calibration_exit_profile(model=args.model, target=args.target, seed=seed,
                                         threads=threads, quick=args.quick, command=argv)
    except (ValueError, OSError, KeyError) as err:
        raise UserError.from_value_error(ValueError(str(err)), "--model") from None
    written = write_outputs(result, out, argv=argv, started_s=started,
                            exits_text=exit_profile_json(exits))
    print(summary(result))
    print(f"profile: {written}  (calibrate took {time.time() - started:.1f} s)")
    return 0


# ---- output ----------------------------------------------------------------------------------
def _csv_text(result: CalibrationResult) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["source", "kind", "label", "held_out", "measured_s", "predicted_s", "rel_error",
                *FEATURE_NAMES])
    groups: Iterable[tuple[str, list[Sample]]] = (
        ("shape", result.samples), ("host_gap", result.gap_samples),
        ("in_situ", result.in_situ), ("extra", result.extras))
    for source, samples in groups:
        for s in samples:
            pred = result.predict(s)
            rel = "" if pred is None else f"{(pred - s.seconds) / s.seconds:.5f}"
            w.writerow([source, s.kind, s.label, s.held_out, f"{s.seconds:.9f}",
                        "" if pred is None else f"{pred:.9f}", rel,
                        *(f"{s.features[f]:g}" for f in FEATURE_NAMES)])
    return buf.getvalue()


def write_outputs(result: CalibrationResult, out: Path | None, *, argv: list[str],
                  started_s: float, exits_text: str | None = None) -> Path:
    """Write profile, env.json, steps CSV and, when measured, the exit profile
    (``<stem>.exits.json``, read by simulations of adaptive exits); returns the profile's
    path."""
    prof = result.profile
    stem = f"{prof.hardware}-{prof.model}"
    env = env_info.collect(target="cuda" if prof.hardware != "cpu" else "cpu",
                           hardware=prof.hardware, run_id=stem, argv=argv,
                           started_s=started_s, run_wall_s=[])
    env["device"]["name"] = prof.provenance.device
    env["num_threads"] = prof.provenance.num_threads
    profile_text = profile_json(prof)
    if out is not None and out.suffix != ".json":
        with staged_dir(out) as tmp:
            write_json(tmp / "env.json", env)
            (tmp / "steps.csv").write_text(_csv_text(result))
            (tmp / f"{stem}.json").write_text(profile_text)
            if exits_text is not None:
                (tmp / f"{stem}.exits.json").write_text(exits_text)
        return out / f"{stem}.json"
    path = out if out is not None else PROFILES_DIR / f"{stem}.json"
    exits = [] if exits_text is None else [(path.with_suffix(".exits.json"), exits_text)]
    atomic_write_all([(path.with_suffix(".env.json"), json.dumps(env, indent=2) + "\n"),
                      (path.with_suffix(".steps.csv"), _csv_text(result)), *exits,
                      (path, profile_text)])  # last: its presence means the set is complete
    return path


def summary(result: CalibrationResult) -> str:
    """Per-stage table: chosen features, CV and held-out errors, in-situ error."""
    lines = [f"{'stage':<19} {'fit':>4} {'held':>4} {'cv MAPE':>8} {'held-out MAPE':>14} "
             f"{'worst':>7} {'in-situ':>8}  model"]
    for kind, r in [*result.stages.items(),
                    *([("step_gap", result.gap)] if result.gap is not None else []),
                    *result.extra_fits.items()]:
        situ = [abs(p - s.seconds) / s.seconds for s in result.in_situ if s.kind == kind
                if (p := result.predict(s)) is not None]
        feats = "+".join(r.fit.features) or "-"
        feats += "".join(f" +grid({g.feature})" for g in r.fit.grids)
        ho = f"{100 * r.held_out_mape:.1f}%" if r.held_out_mape is not None else "-"
        worst = f"{100 * r.held_out_max_error:.1f}%" if r.held_out_max_error is not None else "-"
        st = f"{100 * float(np.median(situ)):.1f}%" if situ else "-"
        lines.append(f"{kind:<19} {r.num_fit:>4} {r.num_held_out:>4} {100 * r.cv_mape:>7.1f}% "
                     f"{ho:>14} {worst:>7} {st:>8}  {r.fit.intercept_s * 1e3:.3f} ms + {feats}")
    prov = result.profile.provenance
    if prov.held_out_mape is not None:
        lines.append(f"held-out MAPE over all stages: {100 * prov.held_out_mape:.2f}% "
                     f"(worst {100 * (prov.held_out_max_error or 0):.1f}%); in-situ = median "
                     "error on steps of short real runs")
    if result.idle is not None:
        idle = result.idle
        waits = "/".join(f"{1e3 * w:g}" for w in idle.after_idle.idle_s)
        shapes = "; ".join(f"{k} " + "/".join(f"x{r:.2f}" for r in v)
                           for k, v in idle.ratios.items())
        later = "/".join(f"{f:.2f}" for f in idle.after_idle.later) or "-"
        lines.append(f"after idle (time over warm time of a step started {waits} ms after the "
                     f"last): {shapes}; the next steps pay {later} of that extra")
    rb = result.profile.readback
    if rb is not None:
        per = "/".join(f"{1e3 * t:.4f}" for t in rb.per_rows_s or [])
        rows = "/".join(str(n) for n in rb.rows or [])
        lines.append(f"readback: {1e3 * rb.readback_s:.4f} ms per readback (decode steps with "
                     f"readback_skip off minus on; {rows} rows: {per} ms)")
    return "\n".join(lines)
