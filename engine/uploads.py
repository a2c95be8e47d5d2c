"""Host -> device integer uploads that never make the host wait for the GPU.

A copy from pageable host memory makes CUDA synchronize the stream first; staging through
pinned memory (torch's caching host allocator keeps the buffer alive until the copy is done)
lets the upload queue behind running work instead (RFC §4).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def upload_ints(values: Sequence[int], device: torch.device) -> torch.Tensor:
    """``values`` as an int64 tensor on ``device``, without a host sync on CUDA."""
    host = torch.tensor(values, dtype=torch.int64)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
