"""The running gpu-check: its options, output folder, log, results so far, and how it runs a
subprocess (``Check``); what every stage is handed. Standard library only."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tools.gpu import outputs
from tools.gpu.proc import Proc, StageFailed, require, run_streaming

REPO = Path(__file__).resolve().parents[2]
_LOOPSERVE = "import sys; from loopserve.cli import main; sys.argv[0] = 'loopserve'; " \
             "sys.exit(main())"


@dataclass
class StageResult:
    """How one stage ended, for gpu_check.json and the table."""

    name: str
    status: str  # ok | failed | n/a | skipped
    seconds: float
    detail: str


@dataclass
class Check:
    """One gpu-check run: options, output folder, log and everything measured."""

    device: str
    out: Path
    budget_s: float
    wheels_dir: Path
    site_dir: Path
    only: set[str] | None
    scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpu-check-")))
    results: dict[str, Any] = field(default_factory=dict)
    stages: list[StageResult] = field(default_factory=list)
    extra_path: list[str] = field(default_factory=list)
    start: float = field(default_factory=time.monotonic)
    log_file: TextIO | None = None
    cuda_ok: bool = True

    @property
    def dry(self) -> bool:
        return self.device != "cuda"

    # ---- output ----------------------------------------------------------------------------
    def say(self, msg: str) -> None:
        """Print a timestamped progress line and log it."""
        line = f"[{time.strftime('%H:%M:%S')} +{time.monotonic() - self.start:6.1f}s] {msg}"
        print(line, flush=True)
        self.log(line)

    def log(self, line: str) -> None:
        # The log stays under the per-file limit whatever a subprocess prints.
        if self.log_file is not None and self.log_file.tell() < outputs.MAX_FILE_BYTES - 2**20:
            self.log_file.write(line + "\n")
            self.log_file.flush()

    # ---- subprocesses ------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1", MPLBACKEND="Agg")
        if self.dry:  # tiny model: threads only add contention noise on a shared CPU
            env.setdefault("OMP_NUM_THREADS", "1")
            env.setdefault("TRITON_INTERPRET", "1")  # triton kernels in the CPU interpreter
        paths = [*self.extra_path, str(REPO)]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        return env

    def sh(self, cmd: list[str], timeout: float, *, echo: bool = True) -> Proc:
        """Run ``cmd`` in the repo under the cap, echoing (unless ``echo`` is false) and
        logging its output."""
        self.log("$ " + " ".join(cmd))
        return run_streaming(cmd, cwd=REPO, env=self.env(), timeout=timeout,
                             emit=self._echo if echo else None)

    def _echo(self, text: str) -> None:
        print(f"    | {text}", flush=True)
        self.log(f"    | {text}")

    def python(self, args: list[str], timeout: float, *, echo: bool = True) -> Proc:
        return self.sh([sys.executable, *args], timeout, echo=echo)

    def loopserve(self, args: list[str], timeout: float, *, echo: bool = True) -> Proc:
        """The ``loopserve`` command (no console script on the GPU machine: call its main)."""
        return self.python(["-c", _LOOPSERVE, *args], timeout, echo=echo)

    def measure(self, what: str, timeout: float, extra: tuple[str, ...] = ()) -> dict[str, Any]:
        """Run a ``tools.gpu.measure`` subcommand; its JSON result."""
        dest = self.scratch / f"{what}.json"
        proc = self.python(["-m", "tools.gpu.measure", what, "--device", self.device,
                            "--json", str(dest), *extra], timeout)
        require(proc, f"gpu measure {what}")
        return dict(json.loads(dest.read_text()))


def need_cuda(c: Check) -> None:
    """Fail a device stage at once when CUDA was asked for but the env stage found none."""
    if not c.cuda_ok:
        raise StageFailed("CUDA is not available on this machine (use --device cpu for "
                          "the dry run)")
