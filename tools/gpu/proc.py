"""Subprocesses for ``tools.gpu.check``: run a command with a hard time cap, echo its output
live, keep it for parsing; plus the two ways a stage ends early. Standard library only."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BAR_ECHO_EVERY_S = 10.0


class StageFailed(Exception):
    """A stage failed; the message is its one-line detail."""


class NotAvailable(Exception):
    """What the stage needs has not landed in this commit (reported as n/a, not a failure)."""


@dataclass
class Proc:
    """A finished subprocess: exit status, merged output and whether it ran out of time."""

    rc: int
    output: str
    timed_out: bool

    def tail(self, n: int = 3) -> str:
        """The last ``n`` non-empty output lines on one line (for a stage's detail)."""
        lines = [ln for ln in self.output.splitlines() if ln.strip()]
        return " | ".join(lines[-n:])[-300:]

    def describe(self) -> str:
        if self.timed_out:
            return f"timed out: {self.tail()}"
        return f"exited {self.rc}: {self.tail()}"


def require(proc: Proc, what: str) -> None:
    """Raise StageFailed unless ``proc`` exited 0 in time."""
    if proc.rc != 0 or proc.timed_out:
        raise StageFailed(f"{what} {proc.describe()}")


def run_streaming(
    cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float,
    emit: Callable[[str], None] | None,
) -> Proc:
    """Run ``cmd`` with stdout and stderr merged, passing each output line to ``emit`` as it
    comes (progress-bar redraws, ended by a carriage return, at most every 10 s and not kept).
    After ``timeout`` seconds its whole process group (started for it) is killed."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    kept: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=_pump, args=(proc.stdout.fileno(), kept, emit),
                              daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    reader.join(timeout=5)
    proc.stdout.close()
    return Proc(proc.returncode, "\n".join(kept), timed_out)


def _pump(fd: int, kept: list[str], emit: Callable[[str], None] | None) -> None:
    buf = b""
    last_bar = 0.0
    while chunk := os.read(fd, 65536):
        buf += chunk
        while (m := re.search(rb"[\r\n]", buf)) is not None:
            seg, is_bar, buf = buf[: m.start()], buf[m.start()] == 13, buf[m.end():]
            text = seg.decode(errors="replace").rstrip()
            if not text.strip():
                continue
            if is_bar:
                if time.monotonic() - last_bar < BAR_ECHO_EVERY_S:
                    continue
                last_bar = time.monotonic()
            else:
                kept.append(text)
            if emit is not None:
                emit(text)
    if buf.strip():
        kept.append(buf.decode(errors="replace").rstrip())
        if emit is not None:
            emit(kept[-1])
