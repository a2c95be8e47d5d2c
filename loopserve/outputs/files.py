"""Output files appear complete or not at all: a staging folder renamed when complete
(``staged_dir``), a temp file renamed over its target (``atomic_write``), and the plain CSV,
JSON and scenario writers. Floats are written with Python's shortest round-trip repr, so the
same run gives the same bytes.
"""

from __future__ import annotations

import csv
import errno
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from loopserve.errors import UserError
from loopserve.runs import interrupts
from loopserve.schema.scenario import Scenario


def new_run_id(target: str, parent: Path) -> str:
    """``YYYYMMDD-HHMMSS-<target>``, suffixed ``-2``, ``-3``... when taken."""
    base = f"{time.strftime('%Y%m%d-%H%M%S')}-{target}"
    run_id, n = base, 1
    while (parent / run_id).exists():
        n += 1
        run_id = f"{base}-{n}"
    return run_id


def run_destination(out: str | None, parent: Path, label: str) -> Path:
    """The run folder: ``--out`` when given (it must not exist or be an empty folder; a
    symlink, dangling or not, stands for its target), else a new ``parent/<run-id>``
    labelled ``label``. Checked before any work."""
    if out is not None:
        dest = Path(out).resolve()  # a symlink's target: the rename must land there
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise UserError("--out", f"{dest} exists and is not an empty folder; pick a new one")
        check_writable(dest, "--out")
        return dest
    check_writable(parent, "results")
    return parent.resolve() / new_run_id(label, parent)


def check_writable(dest: Path, field: str) -> None:
    """Before any work: the nearest existing folder above ``dest`` must be a folder this
    process can create files in (tried, not guessed from permission bits)."""
    base = dest.parent if not dest.exists() else dest
    while not base.exists() and not base.is_symlink():
        base = base.parent
    if not base.is_dir():
        what = "a dangling symlink" if base.is_symlink() else "a file"
        raise UserError(field, f"cannot create {dest}: {base} is {what}, not a folder")
    try:
        tempfile.TemporaryDirectory(prefix=".loopserve-probe-", dir=base).cleanup()
    except OSError as err:
        raise UserError(field, f"cannot write under {base} ({err.strerror}); pick another "
                        "folder") from None


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temp file beside it, renamed when complete (the
    file gets the mode a plain create would give it)."""
    atomic_write_all([(path, data)])


def atomic_write_all(items: Sequence[tuple[Path, str | bytes]]) -> None:
    """Write every ``(path, data)`` to a temp file beside its path first, then rename them
    all, shielded from SIGINT / SIGTERM: the set appears whole or not at all. Temp files
    carry this process's pid, so the next write into the folder removes those a SIGKILL
    left (``remove_leftovers``)."""
    temps: list[tuple[str, Path]] = []
    created: list[Path] = []  # folders this call made, removed again on failure
    umask = os.umask(0)
    os.umask(umask)
    try:
        for path, data in items:
            missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
            for folder in reversed(missing):
                folder.mkdir()
                created.append(folder)
            remove_leftovers(path.parent)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.partial-{os.getpid()}-",
                                       dir=path.parent)
            temps.append((tmp, path))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.encode() if isinstance(data, str) else data)
            os.chmod(tmp, 0o666 & ~umask)
        with interrupts.shielded():
            for tmp, path in temps:
                os.replace(tmp, path)
    except BaseException as exc:
        for tmp, _ in temps:
            Path(tmp).unlink(missing_ok=True)
        for folder in reversed(created):
            if folder.exists() and not any(folder.iterdir()):
                folder.rmdir()
        if isinstance(exc, OSError) and items:
            raise write_error(exc, items[-1][0]) from None
        raise


@contextmanager
def staged_dir(dest: Path) -> Iterator[Path]:
    """Yield a staging folder on ``dest``'s filesystem and publish it as ``dest`` on success;
    delete it (and any parent folder this call created) on failure.

    A ``dest`` that does not exist is staged beside it and renamed. An existing empty folder
    (a mount point, a symlink's target) is staged inside it, and its files are moved up.
    When that last step cannot happen (someone wrote into ``dest`` or created it meanwhile)
    the finished results are kept in a named folder and a UserError says where."""
    dest = dest.resolve()
    created: list[Path] = []
    parent = dest.parent
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    for folder in reversed(created):
        folder.mkdir()
    inside = dest.is_dir()
    home = dest if inside else dest.parent
    remove_leftovers(home)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-{os.getpid()}-", dir=home))
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        for folder in created:
            if folder.exists() and not any(folder.iterdir()):
                folder.rmdir()
        if isinstance(exc, OSError):  # disk full, quota, file too large, I/O error
            raise write_error(exc, dest) from None
        raise
    with interrupts.shielded():
        _publish(tmp, dest, inside)


def _publish(tmp: Path, dest: Path, inside: bool) -> None:
    """Move the finished staging folder ``tmp`` to ``dest``; keep it under a named folder
    when that cannot happen."""
    try:
        if inside:
            others = [p.name for p in dest.iterdir() if p != tmp]
            if others:
                raise OSError(errno.ENOTEMPTY, f"{others[0]} appeared in it during the run")
            for item in tmp.iterdir():
                os.rename(item, dest / item.name)
            tmp.rmdir()
        else:
            os.rename(tmp, dest)
        return
    except OSError as err:
        reason = err.strerror or str(err)
    kept = (dest if inside else dest.parent) / f"{dest.name}.kept-{os.getpid()}"
    try:
        os.rename(tmp, kept)
    except OSError:
        kept = tmp
    raise UserError("--out", f"cannot publish the results as {dest} ({reason}); the finished "
                    f"results are kept in {kept}")


def write_error(exc: OSError, dest: Path) -> UserError:
    """A failed write into ``dest`` (the disk full, a quota, an I/O error) as one line;
    pyarrow's OSErrors carry their reason in the text, not in ``strerror``."""
    reason = exc.strerror or (str(exc).splitlines() or ["write failed"])[0]
    where = f" ({Path(exc.filename).name})" if exc.filename else ""
    return UserError("--out", f"cannot write {dest}{where}: {reason}; nothing was written, "
                     "free space or pick another folder")


def remove_leftovers(parent: Path) -> None:
    """Remove staging folders and temp files in ``parent`` left by a killed process (SIGKILL
    leaves no chance to clean up): their name carries the writer's pid, no longer alive.
    Each is reported on one stderr line; one of unknown origin is reported and kept."""
    for path in parent.glob(".*.partial-*"):
        pid = path.name.rsplit(".partial-", 1)[1].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            print(f"loopserve: removed {path}, left by killed process {pid}", file=sys.stderr)
        elif not pid.isdigit():
            print(f"loopserve: note: {path} is a leftover staging folder; delete it",
                  file=sys.stderr)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n")


def write_scenario(path: Path, scn: Scenario, header: str = "") -> None:
    """The resolved scenario (after --set), loadable again with ``loopserve run``;
    ``header``: comment lines above it (facts derived from it, such as a derived chunk)."""
    data = scn.model_dump(mode="json", exclude_none=True)
    path.write_text(header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
