"""The one destination writer (``loopserve.outputs.files.staged_dir``): staging on the
destination's filesystem, an existing folder (a mount point, a symlink's target) kept as it
is, finished results kept under a named folder when they cannot be published, and a write
that fails (a full disk) as one line with nothing left behind."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
from pathlib import Path

import pytest
import yaml

from loopserve.cli import main
from loopserve.errors import UserError
from loopserve.outputs.files import staged_dir
from tests.scenario_fixtures import tiny


def test_an_existing_empty_folder_is_filled_in_place_never_replaced(tmp_path: Path) -> None:
    # a mount point cannot be removed or renamed over (EBUSY): the folder itself must stay
    dest = tmp_path / "mnt"
    dest.mkdir()
    inode = dest.stat().st_ino
    with staged_dir(dest) as tmp:
        assert tmp.parent == dest  # staged on the destination's filesystem
        (tmp / "summary.json").write_text("{}")
    assert dest.stat().st_ino == inode
    assert sorted(p.name for p in dest.iterdir()) == ["summary.json"]


def test_a_folder_written_into_during_the_run_keeps_the_results_named(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(UserError) as err, staged_dir(dest) as tmp:
        (tmp / "summary.json").write_text("{}")
        (dest / "theirs.txt").write_text("someone else's")
    kept = dest / f"out.kept-{os.getpid()}"
    assert f"the finished results are kept in {kept}" in str(err.value)
    assert (kept / "summary.json").read_text() == "{}"
    assert (dest / "theirs.txt").read_text() == "someone else's"


def test_a_destination_created_meanwhile_keeps_the_results_beside_it(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    with pytest.raises(UserError) as err, staged_dir(dest) as tmp:
        (tmp / "summary.json").write_text("{}")
        dest.mkdir()
        (dest / "theirs.txt").write_text("x")
    kept = tmp_path / f"out.kept-{os.getpid()}"
    assert str(kept) in str(err.value) and (kept / "summary.json").is_file()
    assert len(str(err.value).splitlines()) == 1


def test_a_symlinked_destination_lands_in_its_target(tmp_path: Path) -> None:
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with staged_dir((tmp_path / "link").resolve()) as tmp:
        (tmp / "a").write_text("1")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "target" / "a").is_file()


def test_a_full_disk_while_writing_parquet_is_one_line_and_nothing_left(
    tmp_path: Path,
) -> None:
    # a real write failure: the file-size limit makes every write past 64 KiB fail (EFBIG)
    # as a full disk's would (ENOSPC), in a child process so the limit stays there
    scn = tmp_path / "s.yaml"
    scn.write_text(yaml.safe_dump(tiny(repeats=1), sort_keys=False))
    out = tmp_path / "runs"
    out.mkdir()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        rc = 99
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
            with os.fdopen(write_fd, "w") as err, contextlib.redirect_stderr(err):
                rc = main(["run", str(scn), "--out", str(out / "r"), "--no-progress"])
        finally:
            os._exit(rc)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        err_text = pipe.read()
    _, status = os.waitpid(pid, 0)
    lines = [line for line in err_text.splitlines() if line.strip()]
    assert os.WEXITSTATUS(status) == 2, err_text
    assert len(lines) == 1 and lines[0].startswith("loopserve: error: --out: cannot write "), \
        err_text
    assert "File too large; nothing was written" in lines[0]
    assert list(out.iterdir()) == []
