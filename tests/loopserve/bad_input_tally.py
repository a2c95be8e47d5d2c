"""Running the fault-and-bad-input cases (``tests/loopserve/bad_input_cases.py``): one case
in a folder (``run_case``), and the tally per kind, each case in a forked child bounded in
time and memory (``tally``)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path

from loopserve.cli import main
from loopserve.plan.footprint import LIMIT_ENV
from tests.loopserve.bad_input_cases import Case


def run_case(case: Case, d: Path) -> dict[str, object]:
    """Run one case in folder ``d``: exit status, stderr, the traceback of an exception that
    escaped ``main``, files a failing case left (partial writes), and whether ``keeps``
    matches nothing (a loss)."""
    if case.setup is not None:
        case.setup(d)
    before = _tree(d)
    err = io.StringIO()
    rc, tb = None, None
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main([a.replace("{d}", str(d)) for a in case.argv])
    except SystemExit as done:  # argparse's usage errors
        rc = done.code  # type: ignore[assignment]
    except Exception as exc:  # noqa: BLE001 - counted, that is the point
        tb = f"{type(exc).__name__}: {str(exc)[:300]}"
    after = _tree(d)
    partial = sorted(str(p) for p in after - before) if case.keeps is None and rc != 0 else []
    lost = case.keeps is not None and not list(d.glob(case.keeps))
    return {"rc": rc, "err": err.getvalue(), "traceback": tb, "partial": partial, "lost": lost}


def _tree(d: Path) -> set[Path]:
    return {p.relative_to(d) for p in d.rglob("*")}


def tally(cases: list[Case], timeout_s: int = 60,
          memory_bytes: int = 6 << 30) -> dict[str, dict[str, int]]:
    """Every case run once in a forked child (``timeout_s`` and ``memory_bytes`` of address
    space, a few GiB of which the imports reserve, bound it, so
    a case that hangs or grows without bound on unguarded code is counted, not waited for),
    counted per kind: exit 2 as the table says, a traceback (an exception escaping ``main``,
    MemoryError included), a silent accept (exit 0 where an error belongs), a partial write (a
    failing case left files), a loss (finished results not where ``keeps`` says), a timeout."""
    os.environ[LIMIT_ENV] = str(8 << 30)
    keys = ("cases", "exit 2", "exit 0 as asked", "tracebacks", "silent accepts",
            "partial writes", "losses", "timeouts")
    counts = {k: dict.fromkeys(keys, 0) for k in "ABCDE"}
    for case in cases:
        c = counts[case.kind]
        c["cases"] += 1
        out = _forked(case, timeout_s, memory_bytes)
        if out is None:
            c["timeouts"] += 1
            continue
        c["tracebacks"] += out["traceback"] is not None
        c["partial writes"] += bool(out.get("partial"))
        c["losses"] += bool(out.get("lost"))  # a traceback may have deleted the results too
        if case.fragment is not None:
            c["exit 2"] += bool(out["as_expected"])
            c["silent accepts"] += out.get("rc") == 0
        else:
            c["exit 0 as asked"] += out.get("rc") == 0 and not out.get("lost")
    return counts


def _forked(case: Case, timeout_s: int, memory_bytes: int) -> dict[str, object] | None:
    """``_run`` in a child process bounded in time and memory; None when it ran past
    ``timeout_s`` or was killed."""
    import resource
    import signal

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run the case, send its outcome as JSON, never return
        os.close(read_fd)
        code = 0
        try:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
            signal.alarm(timeout_s)
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    out = run_case(case, Path(tmp))
                except MemoryError:
                    out = {"traceback": "MemoryError", "lost": bool(case.keeps)}
                err = str(out.get("err", ""))
                out["as_expected"] = case.fragment is not None and out.get("rc") == 2 and \
                    len(err.splitlines()) == 1 and case.fragment.replace("{d}", tmp) in err
            with os.fdopen(write_fd, "w") as pipe:
                json.dump({k: v for k, v in out.items() if k != "err"}, pipe)
        except BaseException:  # noqa: BLE001 - the child must end here whatever happens
            code = 1
        os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    return json.loads(text) if text and os.WIFEXITED(status) else None
