"""The footprint estimate (``loopserve.plan.footprint.device_bytes``) against a measured peak:
a CPU run of the ``small`` model in a fresh process, per arm. The peak is the largest growth
of the process's resident set over the run, sampled every half millisecond by a thread,
after a warm-up run has loaded torch's kernels and libraries (tracemalloc cannot see torch's
CPU allocator, which does not go through Python's; ``ru_maxrss`` keeps the imports' own
high-water mark). The estimate must hold it and stay within MULTIPLE of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.core.shapes import SMALL
from loopserve.plan import footprint

MULTIPLE = 2.0
ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import gc, json, os, sys, threading, time
import torch
from engine.core.request import SamplingParams
from engine.llm import LLM
torch.set_num_threads(1)
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
arm = sys.argv[1]
kw = dict(max_num_seqs=8, max_num_batched_tokens=128, prefill_chunk_size=64, block_size=16)
warm = LLM("small", arm=arm, **{**kw, "max_num_seqs": 2}, num_blocks=64)
warm.generate([list(range(1, 80))], [SamplingParams(max_tokens=4, ignore_eos=True)])
del warm
gc.collect()
base = rss()
peak = [base]
done = threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.0005)
t = threading.Thread(target=sample, daemon=True)
t.start()
llm = LLM("small", arm=arm, **kw, num_blocks=640)
prompts = [list(range(1, 200 + 7 * i)) for i in range(8)]
llm.generate(prompts, [SamplingParams(max_tokens=24, ignore_eos=True)] * 8)
done.set()
t.join()
peak[0] = max(peak[0], rss())
print(json.dumps({"peak": peak[0] - base}))
"""
LONGEST = 200 + 7 * 7 - 1 + 24  # the longest request's positions


@pytest.mark.parametrize("arm", ["atomic", "per_depth", "mixed", "wavefront"])
def test_estimate_holds_the_measured_peak_within_a_multiple(arm: str) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, arm], cwd=ROOT, capture_output=True,
                         text=True, timeout=600, check=True)
    peak = json.loads(out.stdout.strip().splitlines()[-1])["peak"]
    cfg = EngineConfig(SMALL, SchedulerConfig(arm=arm, max_num_seqs=8,
                                              max_num_batched_tokens=128,
                                              prefill_chunk_size=64),
                       CacheConfig(num_blocks=640, block_size=16))
    est = footprint.device_bytes(cfg, 4, LONGEST, "torch")
    assert peak <= est <= MULTIPLE * peak, (peak, est)


def test_state_buffers_and_the_largest_step_are_counted() -> None:
    def cfg(seqs: int, chunk: int, budget: int, arm: str = "mixed") -> EngineConfig:
        return EngineConfig(SMALL, SchedulerConfig(arm=arm, max_num_seqs=seqs,
                                                   prefill_chunk_size=chunk,
                                                   max_num_batched_tokens=budget),
                            CacheConfig(num_blocks=64, block_size=16))

    base = footprint.device_bytes(cfg(8, 64, 128), 4, 256, "triton")
    # the prompt state buffers: max_num_seqs x (chunk + 1) rows of hidden, nothing else
    assert footprint.device_bytes(cfg(8, 96, 128), 4, 256, "triton") - base == pytest.approx(
        8 * 32 * SMALL.hidden_size * 4 * footprint.ALLOCATOR_SLACK, abs=1)
    # the wavefront arm: one prompt state per chunk in flight, two per request at 64 / 128
    assert footprint.device_bytes(cfg(8, 64, 128, "wavefront"), 4, 256, "triton") - base == (
        pytest.approx(8 * 64 * SMALL.hidden_size * 4 * footprint.ALLOCATOR_SLACK, abs=1))
    # a larger budget: more activation rows in the largest step
    assert footprint.device_bytes(cfg(8, 64, 256), 4, 256, "triton") > base
    # torch's attention scratch grows with the context, Triton's does not
    assert footprint.device_bytes(cfg(8, 64, 128), 4, 4096, "triton") == base
    assert footprint.device_bytes(cfg(8, 64, 128), 4, 4096, "torch") > (
        footprint.device_bytes(cfg(8, 64, 128), 4, 256, "torch"))
