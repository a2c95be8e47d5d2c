"""Tiny scenarios for the loopserve CLI/schema/report tests (constant cost, tiny model)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

TINY: dict[str, Any] = {
    "name": "tiny",
    "model": "tiny",
    "hardware": "h200",
    "cost": {"kind": "constant", "core_call_s": 0.001},
    "seed": 0,
    "repeats": 2,
    "arms": ["A0", "A1", "A2"],
    "scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 16, "prefill_chunk_size": 8},
    "cache": {"block_size": 4},
    "workload": {
        "kind": "interference",
        "decode_population": 2,
        "decode_prompt_tokens": 8,
        "decode_output_tokens": 16,
        "inject": [{"at_decode_tokens": 4, "prompt_tokens": 24, "output_tokens": 3}],
    },
}


def tiny(**changes: Any) -> dict[str, Any]:
    """A copy of TINY with top-level keys replaced (None deletes the key)."""
    data = copy.deepcopy(TINY)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def write_scenario(folder: Path, data: dict[str, Any], name: str = "scenario.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
