"""Builds a runner's ``CallGraphs`` from its settings and config (sizes, static buffers)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.config import EngineConfig
from engine.graphs.buckets import GRAPH_MODES, capture_sizes
from engine.graphs.call_graphs import CallGraphs, Capture, cuda_capture
from engine.graphs.static_call import StaticCall
from engine.kv_cache import KVCache
from engine.model.ouro import OuroForCausalLM
from kernels.attention import AttentionBackend, AttentionMetadata

__all__ = ["CallGraphs", "Capture", "GraphSettings", "build_call_graphs", "max_graph_rows"]

MAX_CAPTURE_ROWS = 512  # vLLM's largest default capture size


@dataclass(frozen=True, slots=True)
class GraphSettings:
    """``mode`` (off | decode | mixed) and the capture function (None: CUDA graphs; tests
    pass ``eager_capture`` to run the graph path on the CPU)."""

    mode: str = "off"
    capture: Capture | None = None

    @classmethod
    def checked(cls, mode: str, device: torch.device, capture: Capture | None = None
                ) -> GraphSettings:
        """The settings, or a one-line ValueError when ``mode`` cannot run on ``device``."""
        if mode not in GRAPH_MODES:
            raise ValueError(f"runner.cuda_graphs: {mode!r}; use one of {', '.join(GRAPH_MODES)}")
        if mode != "off" and device.type != "cuda" and capture is None:
            raise ValueError(f"runner.cuda_graphs: {mode!r} needs a CUDA device, not "
                             f"{device.type}; set cuda_graphs: off")
        return cls(mode, capture)

    @property
    def scratch_blocks(self) -> int:
        """KV blocks past the core's that the padding rows write (one with graphs)."""
        return int(self.mode != "off")


def max_graph_rows(mode: str, cfg: EngineConfig) -> int:
    """The largest bucket: every decode row of a full batch; in ``mixed`` mode a full token
    budget (both at most ``MAX_CAPTURE_ROWS``)."""
    sched = cfg.scheduler
    rows = sched.max_num_seqs if mode == "decode" else sched.max_num_batched_tokens
    return max(1, min(rows, MAX_CAPTURE_ROWS))


def build_call_graphs(settings: GraphSettings, cfg: EngineConfig, model: OuroForCausalLM,
                      kv_cache: KVCache, backend: AttentionBackend) -> CallGraphs | None:
    """Graphs over ``kv_cache``, whose block ``cache.num_blocks`` (one past the core's) is the
    padding rows' scratch; None when the mode is off."""
    if settings.mode == "off":
        return None
    device, dtype = kv_cache.k[0].device, kv_cache.k[0].dtype
    sizes = capture_sizes(max_graph_rows(settings.mode, cfg))
    static = StaticCall(sizes[-1], cfg.model.hidden_size, cfg.cache.num_blocks,
                        kv_cache.block_size, device, dtype)
    layers = kv_cache.layers

    def forward(hidden: torch.Tensor, positions: torch.Tensor,
                meta: AttentionMetadata) -> torch.Tensor:
        return model.recurrent(hidden, positions, layers, meta, backend)

    capture = settings.capture if settings.capture is not None else cuda_capture()
    return CallGraphs(settings.mode, sizes, static, backend, forward, capture)
