"""One markdown row per run folder, for the claim tables of docs/fidelity.md and
docs/performance.md.

``python -m tools.claims RUN_DIR... [--profile PATH]`` reads each folder and prints the table's
header once per kind, then one row per folder:

- a ``loopserve fidelity`` folder (``fidelity.json`` and ``env.json``): the date, the scenario,
  the profile's held-out per-step MAPE, the ITL p50, TTFT p50 and ITL p99 errors against the
  median measured run per arm, the same at the runs' own speed, the targets verdict and the
  machine's steadiness, and the command that reproduced it;
- a ``python -m tools.bench`` folder (``bench.json`` and ``env.json``): the date, the build
  (native or the Python sources), the median core calls/s per arm and the command.

Run folders stay out of the repository; the row is what the docs keep. ``--profile`` rewrites
the ``--profile`` argument of a fidelity command (for a profile checked in under
``results/profiles/`` after the run). A folder of neither kind is an error (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

ARMS = ("atomic", "per_depth", "mixed", "wavefront")
FIDELITY_HEADER = (
    "| measured | scenario | profile held-out MAPE "
    "| ITL p50 error (the arms run, in atomic / per_depth / mixed / wavefront order) "
    "| TTFT p50 error | ITL p99 error | at run speed: ITL p50 / TTFT p50 | targets "
    "| machine | command |\n|---|---|---|---|---|---|---|---|---|---|"
)
BENCH_HEADER = (
    "| measured | build | atomic | per_depth | mixed | wavefront | command |\n"
    "|---|---|---|---|---|---|---|"
)


class ClaimError(ValueError):
    """A folder that is not a fidelity or bench run folder, or lacks a field."""


def _load(path: Path) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ClaimError(f"{path}: cannot read ({e})") from e
    return doc


def _date(run_dir: Path, env: dict[str, Any]) -> str:
    """YYYY-MM-DD from env.json's start time, else from a UTC stamp in the folder's name."""
    started = env.get("started_at")
    if isinstance(started, str) and re.match(r"\d{4}-\d{2}-\d{2}", started):
        return started[:10]
    m = re.search(r"(\d{4})(\d{2})(\d{2})[T-]\d{4}", run_dir.name)
    if m is None:
        raise ClaimError(f"{run_dir}: no date in env.json (started_at) or in the folder name")
    return "-".join(m.groups())


def _command(env: dict[str, Any], profile: str | None) -> str:
    cmd = env.get("command")
    if isinstance(cmd, str):
        cmd = shlex.split(cmd)
    if not isinstance(cmd, list) or not cmd:
        raise ClaimError("env.json has no command")
    args = []
    skip = False
    for a in cmd:  # the run's own folder and progress bar are not part of the claim
        if skip or a == "--no-progress":
            skip = False
            continue
        if a == "--out":
            skip = True
            continue
        args.append(a)
    prog = Path(args[0]).name
    args = (["python"] if prog.startswith("python") else [prog]) + args[1:]
    if profile is not None and "--profile" in args:
        args[args.index("--profile") + 1] = profile
    return "`" + shlex.join(args) + "`"


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}"


def _per_arm(arms: dict[str, Any], metric: str) -> str:
    return " / ".join(_pct(arms[a][metric]["rel_error"]) for a in ARMS if a in arms) + "%"


def fidelity_row(run_dir: Path, profile: str | None = None) -> str:
    """The docs/fidelity.md row of one ``loopserve fidelity`` folder."""
    fid = _load(run_dir / "fidelity.json")
    env = _load(run_dir / "env.json")
    try:
        arms = fid["arms"]
        speed = fid.get("at_run_speed")  # absent from runs of an older fidelity
        at_speed = "n/a" if speed is None else " / ".join(
            f"{_pct(speed['arms'][a]['itl_p50_ms']['rel_error'])}, "
            f"{_pct(speed['arms'][a]['ttft_p50_ms']['rel_error'])}"
            for a in ARMS if a in speed["arms"]) + "%"
        targets = fid["targets"]
        met = [a for a in ARMS if a in targets["arms"] and all(targets["arms"][a].values())]
        verdict = "met in " + ", ".join(met) if met else "missed"
        steady = "steady" if targets.get("machine_steady") else "unsteady"
        if speed is not None:
            steady += f", x{speed['step_time_ratio']:.3f} of calibration"
        cells = [
            _date(run_dir, env), str(fid["scenario"]),
            f"{fid['profile']['held_out_mape'] * 100:.2f}%",
            _per_arm(arms, "itl_p50_ms"), _per_arm(arms, "ttft_p50_ms"),
            _per_arm(arms, "itl_p99_ms"), at_speed, verdict, steady,
            _command(env, profile),
        ]
    except (KeyError, TypeError) as e:
        raise ClaimError(f"{run_dir}: fidelity.json lacks {e}") from e
    return "| " + " | ".join(cells) + " |"


def bench_row(run_dir: Path) -> str:
    """The docs/performance.md row of one ``python -m tools.bench`` folder."""
    bench = _load(run_dir / "bench.json")
    env = _load(run_dir / "env.json")
    try:
        by_arm = {a["arm"]: a for a in bench["arms"]}
        build = "Python sources"
        if bench.get("native"):
            kind = (env.get("native") or {}).get("build")
            build = f"mypyc build, {kind}" if kind else "mypyc build"
        cells = [_date(run_dir, env), build]
        for arm in ARMS:
            if arm not in by_arm:  # a run of fewer arms (--arms) leaves the column empty
                cells.append("–")
                continue
            a = by_arm[arm]
            notes = []
            if a.get("ratio_to_simpy_loop"):
                notes.append(f"{a['ratio_to_simpy_loop']:.3f}x the SimPy loop")
            if a.get("pure_median_core_calls_s"):
                notes.append(f"sources {a['pure_median_core_calls_s']:,.0f}")
            cell = f"{a['median_core_calls_s']:,.0f}"
            cells.append(cell + (f" ({'; '.join(notes)})" if notes else ""))
        cells.append(_command(env, None))
    except (KeyError, TypeError) as e:
        raise ClaimError(f"{run_dir}: bench.json lacks {e}") from e
    return "| " + " | ".join(cells) + " |"


def rows(run_dirs: list[Path], profile: str | None = None) -> str:
    """The markdown of every folder: each kind's header once, then its rows in the given order."""
    fidelity: list[str] = []
    bench: list[str] = []
    for d in run_dirs:
        if (d / "fidelity.json").is_file():
            fidelity.append(fidelity_row(d, profile))
        elif (d / "bench.json").is_file():
            bench.append(bench_row(d))
        else:
            raise ClaimError(f"{d}: neither fidelity.json nor bench.json; pass a run folder "
                             "of loopserve fidelity or python -m tools.bench")
    parts = []
    if fidelity:
        parts.append("\n".join([FIDELITY_HEADER, *fidelity]))
    if bench:
        parts.append("\n".join([BENCH_HEADER, *bench]))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.claims", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR",
                   help="loopserve fidelity or tools.bench output folders")
    p.add_argument("--profile", help="the --profile to print in a fidelity row's command "
                   "(the checked-in path of the profile the run used)")
    args = p.parse_args(argv)
    try:
        print(rows(args.run_dirs, args.profile))
    except ClaimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
