"""Counted device -> host readbacks: each one makes the host wait for the device on CUDA.

RFC §4 allows a step two: the gate (or lookahead) scores when a decode row needs an exit
signal, and a CODA step's sampled tokens. The runner reads results only through
``Readbacks.host``, so ``last_step`` says how many a step did (tests assert it; the GPU
check prints it).
"""

from __future__ import annotations

import torch


class Readbacks:
    """Device -> host copies, counted per step and in total."""

    def __init__(self) -> None:
        self.total = 0
        self.last_step = 0

    def start_step(self) -> None:
        self.last_step = 0

    def host(self, tensor: torch.Tensor) -> torch.Tensor:
        """A copy of ``tensor`` on the CPU (one counted readback). A copy on every device, so
        a profiler sees the readback as one ``aten::_to_copy`` on the CPU too."""
        self.total += 1
        self.last_step += 1
        return tensor.to("cpu", copy=True)
