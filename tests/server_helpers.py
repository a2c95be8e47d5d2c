"""An in-process ``loopserve serve`` for tests: uvicorn on a thread, an ephemeral loopback
port, always stopped (engine thread joined, socket closed) when the block ends."""

from __future__ import annotations

import logging
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from loopserve.server.launch import ServeOptions, bind, build_service, make_server
from loopserve.server.service import Service

STOP_TIMEOUT_S = 30.0


@dataclass
class Running:
    url: str
    service: Service

    def metric(self, name: str, **labels: str) -> float:
        """One sample of ``/metrics`` (the first series of ``name`` matching ``labels``)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            m = re.match(r"^([^{ ]+)(?:\{([^}]*)\})? (\S+)$", line)
            if not m or m.group(1) != name:
                continue
            have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                return float(m.group(3))
        raise KeyError(f"{name} {labels} not in /metrics")

    def wait_metric(self, name: str, value: float, timeout_s: float = 10.0,
                    **labels: str) -> None:
        deadline = time.monotonic() + timeout_s
        while (got := self.metric(name, **labels)) != value:
            assert time.monotonic() < deadline, f"{name}{labels} stayed {got}, not {value}"
            time.sleep(0.02)


@contextmanager
def server_log() -> Iterator[list[logging.LogRecord]]:
    """Records the server's loggers (uvicorn's and loopserve's) emit inside the block."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.DEBUG)
    loggers = [logging.getLogger(n) for n in ("uvicorn.error", "loopserve.server")]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield records
    finally:
        for lg in loggers:
            lg.removeHandler(handler)


@contextmanager
def running_server(**options: object) -> Iterator[Running]:
    """Serve the tiny model (``ServeOptions`` fields override) until the block ends."""
    service = build_service(ServeOptions(**{"model": "tiny", **options}))  # type: ignore[arg-type]
    sock = bind("127.0.0.1", 0)
    server = make_server(service, shutdown_timeout_s=2)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name="test-uvicorn")
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        host, port = sock.getsockname()[:2]
        yield Running(f"http://{host}:{port}", service)
    finally:
        server.should_exit = True
        thread.join(STOP_TIMEOUT_S)
        sock.close()
        assert not thread.is_alive(), "uvicorn did not stop"
        assert not service.engine.alive, "engine thread still running"
