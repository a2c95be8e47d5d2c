"""``python -m tools.gpu.graph_measure graphs|graph_tokens|fa4 --device cuda --json PATH``: the
GPU-path measurements of ``tools.gpu.graphs``, one per process (a CUDA error or a hang in one
cannot take the check down)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from tools.gpu.graphs import fa4_check, graph_core, graph_tokens
from tools.gpu.sizes import SIZES


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="gpu-check measurements of the GPU path")
    ap.add_argument("what", choices=("graphs", "graph_tokens", "fa4"))
    ap.add_argument("--device", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--json", type=Path, required=True, help="where to write the result")
    ap.add_argument("--copy-bps", type=float, default=None,
                    help="measured copy bandwidth (bytes/s) for the weight floor")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("tools.gpu.graph_measure: CUDA is not available", file=sys.stderr)
        return 2
    device, sizes = torch.device(args.device), SIZES[args.device]
    if args.what == "graphs":
        result = graph_core(device, sizes, args.copy_bps)
    elif args.what == "graph_tokens":
        result = graph_tokens(device, sizes)
    else:
        result = fa4_check(device)
    args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
