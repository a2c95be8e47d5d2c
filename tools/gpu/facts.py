"""The ``env`` measurement: what the check ran on (device, memory, driver, library versions);
``nvidia-smi`` is only ever queried, never used to change a setting."""

from __future__ import annotations

import importlib
import os
import platform
import shutil
import subprocess
import sys
from typing import Any

import torch


def _nvidia_smi() -> dict[str, str] | None:
    """A read-only ``nvidia-smi`` query (never a setting): the essential fields, then the
    extras one by one so an unsupported one costs only itself."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None

    def query(fields: tuple[str, ...]) -> dict[str, str] | str:
        try:
            res = subprocess.run([exe, f"--query-gpu={','.join(fields)}",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            return str(err)
        if res.returncode != 0 or not res.stdout.strip():
            return (res.stderr or res.stdout).strip()[:300]
        values = [v.strip() for v in res.stdout.splitlines()[0].split(",")]
        return dict(zip(fields, values, strict=False))

    base = query(("name", "memory.total", "driver_version"))
    if isinstance(base, str):
        return {"error": base}
    for extra in ("clocks.sm", "clocks.max.sm", "clocks.mem", "temperature.gpu", "power.limit"):
        got = query((extra,))
        if isinstance(got, dict):
            base.update(got)
    return base


def env_info(device: torch.device) -> dict[str, Any]:
    """What the check ran on: device, memory, driver and library versions."""
    info: dict[str, Any] = {
        "device": device.type,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "num_cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    try:
        info["triton"] = importlib.import_module("triton").__version__
    except ImportError:
        info["triton"] = None
    smi = _nvidia_smi()
    info["nvidia_smi"] = smi
    info["driver"] = (smi or {}).get("driver_version")
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    multiprocessors=props.multi_processor_count,
                    capability=f"{props.major}.{props.minor}")
    else:
        info.update(gpu=None, gpu_memory_gib=None)
    return info
