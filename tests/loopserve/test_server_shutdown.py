"""SIGTERM or SIGINT (Ctrl-C) on a `loopserve serve` subprocess: it stops accepting, lets a
short in-flight stream finish, aborts the one still running after the grace period, exits 0,
and leaves no process or bound port behind."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _stream(url: str, max_tokens: int, out: dict, started: threading.Event) -> None:
    out["tokens"], out["done"], out["error"] = 0, False, None
    try:
        with httpx2.stream("POST", url + "/v1/completions", timeout=30, json={
                "prompt": [1, 2, 3], "max_tokens": max_tokens, "temperature": 0,
                "stream": True}) as r:
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    out["done"] = True
                elif line.startswith("data: "):
                    event = json.loads(line[6:])
                    out["tokens"] += bool(event.get("choices"))
                    out["error"] = event.get("error", {}).get("message") or out["error"]
                    started.set()
    except httpx2.HTTPError as err:
        out["error"] = type(err).__name__
    started.set()


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_drains_then_exits_zero(sig: signal.Signals) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopserve", "serve", "--model", "tiny", "--port", "0",
         "--shutdown-timeout", "3"], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
        ready = lines.get(timeout=60)
        assert ready.startswith("loopserve: serving tiny on http://127.0.0.1:"), ready
        url = ready.split(" on ")[1].strip()
        port = int(url.rsplit(":", 1)[1])
        assert _children(proc.pid) == []
        short, long_ = {}, {}
        events = [threading.Event(), threading.Event()]
        threads = [threading.Thread(target=_stream, args=(url, n, out, ev)) for n, out, ev in
                   ((1000, long_, events[0]), (20, short, events[1]))]
        threads[0].start()
        assert events[0].wait(30)
        threads[1].start()
        assert events[1].wait(30)
        proc.send_signal(sig)
        t0 = time.monotonic()
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
        took = time.monotonic() - t0
        for t in threads:
            t.join(30)
        # in flight at the signal, finished within the grace period
        assert short == {"tokens": 20, "done": True, "error": None}
        # still running when the grace period ended: aborted, the stream closed properly
        assert long_["tokens"] < 1000 and long_["done"]
        assert long_["error"] == "aborted: the server shut down before it finished"
        assert 3 <= took < 15
        stderr = proc.stderr.read() if proc.stderr else ""
        assert "Traceback" not in stderr, stderr
        assert "interrupted" not in stderr, stderr
        with socket.socket() as s:  # nothing listens on the port (TIME_WAIT pairs may remain)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
