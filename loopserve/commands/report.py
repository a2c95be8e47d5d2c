"""``loopserve report RUN_DIR [RUN_DIR ...]``: one report.html comparing run folders (a sim run
and a cpu run side by side, say), rendered from the files the runs wrote."""

from __future__ import annotations

import argparse
from pathlib import Path

from loopserve.errors import UserError
from loopserve.outputs.files import atomic_write_all, check_writable
from loopserve.outputs.rundata import RunData, load_run
from loopserve.report.page import make_figures, render_html


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``report`` subcommand on the CLI's subparsers."""
    rep = sub.add_parser("report", help="one report.html comparing one or more run folders")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    rep.add_argument("--out", help="folder for report.html (default: the first RUN_DIR)")
    rep.add_argument("--force", action="store_true",
                     help="replace an existing report.html (a single RUN_DIR's own report is "
                          "rendered again without it)")
    rep.set_defaults(handler=main)


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Load every run folder, render the figures and the page; UserError on a bad folder."""
    run_dirs: list[str] = args.run_dirs
    if args.out:
        if Path(args.out).exists() and not Path(args.out).is_dir():
            raise UserError("--out", f"{args.out} is a file; give a folder for report.html")
        check_writable(Path(args.out).resolve(), "--out")
    runs: list[RunData] = []
    for d in run_dirs:
        run = load_run(d)
        if sum(Path(x).name == Path(d).name for x in run_dirs) > 1:
            run.label = f"{run.label} ({len(runs) + 1})"
        runs.append(run)
    out_dir = Path(args.out).resolve() if args.out else runs[0].path
    path = out_dir / "report.html"
    own = len(runs) == 1 and out_dir.resolve() == runs[0].path.resolve()
    if path.exists() and not own and not args.force:
        raise UserError("--out", f"{path} exists; give another --out or add --force to "
                        "replace it")
    figs = make_figures(runs)
    pngs = [(out_dir / f.filename, f.png) for f in figs if own]
    atomic_write_all([*pngs, (path, render_html(runs, figs))])
    print(f"report: {path}")
    return 0
