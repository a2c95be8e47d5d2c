"""``loopserve report RUN_DIR [RUN_DIR ...]``: one report.html comparing run folders (a sim run
and a cpu run side by side, say), rendered from the files the runs wrote; or, given
``bench serve`` result files or folders of them, one page of their client-side TTFT and ITL
(``loopserve.report.bench``): ``report.html`` in the first folder, ``<name>.html`` beside a
first file."""

from __future__ import annotations

import argparse
from pathlib import Path

from loopserve.commands import command_help
from loopserve.errors import UserError
from loopserve.outputs.files import atomic_write_all, check_writable
from loopserve.outputs.rundata import RunData, load_run
from loopserve.report.bench import is_bench_result, load_results, render_bench_html
from loopserve.report.page import make_figures, render_html


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``report`` subcommand on the CLI's subparsers."""
    rep = sub.add_parser("report", help=command_help("report"))
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
    bench = [is_bench_result(Path(d)) for d in run_dirs]
    if any(bench):
        if not all(bench):
            raise UserError("RUN_DIR", "give run folders or bench serve results, not both")
        return _bench_report(run_dirs, args.out)
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


def _bench_report(paths: list[str], out: str | None) -> int:
    results = [r for p in paths for r in load_results(Path(p))]
    first = Path(paths[0])
    if out:
        dest = Path(out) / "report.html"
    else:
        dest = first / "report.html" if first.is_dir() else first.with_suffix(".html")
    atomic_write_all([(dest, render_bench_html(results))])
    print(f"report: {dest}")
    return 0
