"""Device measurements for ``tools.gpu.check``, one subcommand per stage, each run in its own
process so a hang or a CUDA error cannot take the whole check down.

- ``env``: device facts (GPU name, memory, driver, torch/triton/python versions).
- ``ceilings``: device-to-device copy bandwidth (bytes read + written) and a bf16 matmul.
- ``core``: recurrent core call time at 1/8/32 decode rows and 8 + a prompt chunk, torch and
  triton attention, and the runner's steps with their readbacks (``tools.gpu.core``).
- ``divergence``: bf16 greedy A2 against A1 and A0 under load (``tools.gpu.divergence``).

On CUDA everything is timed with CUDA events after warm-up; on CPU (the dry run) the same code
runs with tiny sizes and ``time.perf_counter``. Inputs are random, never zeros. Each
subcommand writes its result as JSON to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from tools.gpu.ceilings import ceilings
from tools.gpu.core import core
from tools.gpu.divergence import divergence
from tools.gpu.facts import env_info
from tools.gpu.sizes import SIZES


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="gpu-check measurements (one stage per call)")
    ap.add_argument("what", choices=("env", "ceilings", "core", "divergence"))
    ap.add_argument("--device", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--json", type=Path, required=True, help="where to write the result")
    ap.add_argument("--copy-bps", type=float, default=None,
                    help="measured copy bandwidth (bytes/s) for the core floor")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("tools.gpu.measure: CUDA is not available", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    sizes = SIZES[args.device]
    if args.what == "env":
        result = env_info(device)
    elif args.what == "ceilings":
        result = ceilings(device, sizes)
    elif args.what == "divergence":
        result = divergence(device, sizes)
    else:
        result = core(device, sizes, args.copy_bps)
    args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
