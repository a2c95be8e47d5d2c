"""Serving benchmarks (``make bench``, after the simulator's): the two targets of the server.

1. Client throughput: ``loopserve bench serve``'s client against the stub server
   (``loopserve.bench.stub``, its own process), one-token requests all at once, at most
   ``--concurrency`` in flight. Target: at least 500 requests/s, so the client is never what a
   serving benchmark measures.
2. Serving overhead: the tiny model served in this process (engine records kept), loaded by
   ``loopserve bench serve`` in a subprocess with 16 concurrent streams; the client's ITL p50
   against the engine's ITL p50 (token times on the engine thread) of the same run. Target:
   within 1 ms.

    python -m tools.bench_serving [--requests 3000] [--streams 16] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from loopserve.bench import client
from loopserve.bench.datasets import SampleRequest
from loopserve.server.launch import ServeOptions, bind, build_service, make_server
from loopserve.stats.metrics import inter_token_latencies

ROOT = Path(__file__).resolve().parents[1]
TARGET_REQ_S = 500.0
TARGET_ITL_GAP_MS = 1.0


def _start(cmd: list[str], prefix: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(prefix):
        proc.kill()
        raise RuntimeError(f"{cmd}: no ready line, got {line!r}")
    return proc, line.split()[-1]


def client_throughput(num_requests: int, concurrency: int) -> dict[str, Any]:
    proc, url = _start([sys.executable, "-m", "loopserve.bench.stub"], "stub: ")
    try:
        reqs = [SampleRequest([1], 1, 1)] * num_requests
        outcomes, duration = asyncio.run(client.run(
            url, "stub", reqs, [0.0] * num_requests, max_concurrency=concurrency,
            progress=False))
    finally:
        proc.terminate()
        proc.wait(10)
    done = sum(o.success for o in outcomes)
    return {"requests": num_requests, "completed": done, "concurrency": concurrency,
            "duration_s": duration, "requests_per_s": done / duration,
            "target_requests_per_s": TARGET_REQ_S}


def serving_overhead(streams: int, output_len: int, prompts: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    service = build_service(ServeOptions(model="tiny", max_num_seqs=streams, record=True))
    sock = bind("127.0.0.1", 0)
    server = make_server(service)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        host, port = sock.getsockname()[:2]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "result.json"
            subprocess.run([
                sys.executable, "-m", "loopserve", "bench", "serve",
                "--base-url", f"http://{host}:{port}", "--model", "tiny",
                "--dataset-name", "random", "--random-input-len", "16",
                "--random-output-len", str(output_len), "--num-prompts", str(prompts),
                "--max-concurrency", str(streams), "--ignore-eos", "--no-progress",
                "--result-file", str(out)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
            result = json.loads(out.read_text())
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()
    records = service.engine.records
    assert records is not None
    client_itl = [g for itl in result["itls"] for g in itl]
    engine_itl = inter_token_latencies(records)
    c50, e50 = float(np.median(client_itl)) * 1e3, float(np.median(engine_itl)) * 1e3
    return {"streams": streams, "prompts": prompts, "output_len": output_len,
            "completed": result["completed"], "client_itl_p50_ms": c50,
            "engine_itl_p50_ms": e50, "gap_ms": c50 - e50,
            "client_itl_p99_ms": float(np.percentile(client_itl, 99)) * 1e3,
            "engine_itl_p99_ms": float(np.percentile(engine_itl, 99)) * 1e3,
            "target_gap_ms": TARGET_ITL_GAP_MS}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench_serving", description=__doc__)
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--json", type=Path, help="also write the figures here")
    a = p.parse_args(argv)
    tput = client_throughput(a.requests, a.concurrency)
    verdict = "met" if tput["requests_per_s"] >= TARGET_REQ_S else "MISSED"
    print(f"bench serve client vs stub: {tput['requests_per_s']:,.0f} one-token requests/s "
          f"({tput['completed']}/{a.requests} at concurrency {a.concurrency}); target "
          f">= {TARGET_REQ_S:.0f}: {verdict}")
    over = serving_overhead(a.streams, a.output_len, a.prompts)
    verdict = "met" if abs(over["gap_ms"]) <= TARGET_ITL_GAP_MS else "MISSED"
    print(f"serving overhead, {a.streams} streams, tiny model: client ITL p50 "
          f"{over['client_itl_p50_ms']:.3f} ms, engine ITL p50 {over['engine_itl_p50_ms']:.3f} "
          f"ms, gap {over['gap_ms']:+.3f} ms (p99 {over['client_itl_p99_ms']:.2f} vs "
          f"{over['engine_itl_p99_ms']:.2f}); target within {TARGET_ITL_GAP_MS:g} ms: {verdict}")
    if a.json:
        a.json.write_text(json.dumps({"client_throughput": tput, "serving_overhead": over},
                                     indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
