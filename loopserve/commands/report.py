"""``loopserve report RUN_DIR [RUN_DIR ...]``: one report.html comparing run folders (a sim run
and a cpu run side by side, say), rendered from the files the runs wrote."""

from __future__ import annotations

import argparse
from pathlib import Path

from loopserve.commands import command_help
from loopserve.outputs.files import atomic_write_all, check_writable
from loopserve.outputs.rundata import RunData, load_run
from loopserve.report.page import make_figures, render_html


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``report`` subcommand on the CLI's subparsers."""
    rep = sub.add_parser("report", help=command_help("report"))
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    rep.add_argument("--out", help="folder for report.html (default: the first RUN_DIR)")
    rep.set_defaults(handler=main)


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Load every run folder, render the figures and the page; UserError on a bad folder."""
    run_dirs: list[str] = args.run_dirs
    if args.out:
        check_writable(Path(args.out), "--out")
    runs: list[RunData] = []
    for d in run_dirs:
        run = load_run(d)
        if sum(Path(x).name == Path(d).name for x in run_dirs) > 1:
            run.label = f"{run.label} ({len(runs) + 1})"
        runs.append(run)
    out_dir = Path(args.out) if args.out else runs[0].path
    figs = make_figures(runs)
    path = out_dir / "report.html"
    pngs = [(out_dir / f.filename, f.png) for f in figs
            if len(runs) == 1 and out_dir.resolve() == runs[0].path.resolve()]
    atomic_write_all([*pngs, (path, render_html(runs, figs))])
    print(f"report: {path}")
    return 0
