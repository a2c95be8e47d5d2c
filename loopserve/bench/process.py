"""A ``loopserve serve`` subprocess: started, waited for (ready line, ``/health``), read
(``/metrics``) and always stopped with SIGTERM (SIGKILL only if it will not go)."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from prometheus_client.parser import text_string_to_metric_families

READY = "loopserve: serving "


class ServerProcess:
    """``with ServerProcess(args, log) as srv: srv.url ...``; ``args`` follow ``loopserve``."""

    def __init__(self, args: Sequence[str], log_path: Path, *, cwd: Path | None = None,
                 start_timeout_s: float = 300.0, stop_timeout_s: float = 60.0) -> None:
        self.cmd = [sys.executable, "-m", "loopserve", *args]
        self.log_path = log_path
        self.cwd = cwd
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.url = ""
        self.returncode: int | None = None
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> ServerProcess:
        log = self.log_path.open("w")
        self._proc = proc = subprocess.Popen(self.cmd, cwd=self.cwd, stdout=subprocess.PIPE,
                                             stderr=log, text=True)
        log.close()
        lines: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        out = proc.stdout

        def pump() -> None:
            for x in out:
                lines.put(x)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout_s
        try:
            while True:
                try:
                    line = lines.get(timeout=0.2)
                except queue.Empty:
                    line = ""
                if line.startswith(READY):
                    self.url = line.split(" on ")[1].strip()
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start ({' '.join(self.cmd)}): "
                                       f"{self._log_tail()}")
            with urllib.request.urlopen(self.url + "/health", timeout=30) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"{self.url}/health answered {resp.status}")
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop()

    def _stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
        self.returncode = proc.returncode
        self._proc = None

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text().strip().splitlines()
        except OSError:
            return ""
        return lines[-1] if lines else "(no output)"

    def metrics(self) -> dict[str, float]:
        """Every sample of ``/metrics`` by name (labels dropped, values summed)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
        return out
