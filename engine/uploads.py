"""Host -> device integer uploads that never make the host wait for the GPU.

A copy from pageable host memory makes CUDA synchronize the stream first; staging through
pinned memory (torch's caching host allocator keeps the buffer alive until the copy is done)
lets the upload queue behind running work instead (RFC §4).
"""

from __future__ import annotations

import array
from collections.abc import Sequence

import torch


def upload_ints(values: Sequence[int], device: torch.device) -> torch.Tensor:
    """``values`` as an int64 tensor on ``device``, without a host sync on CUDA."""
    # Through array.array: about three times faster than torch.tensor(list), whose cost is a
    # large share of a core call's host time (tools/host_bench.py measures it).
    host = torch.frombuffer(array.array("q", values), dtype=torch.int64) if values else (
        torch.empty(0, dtype=torch.int64))
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
