"""CUDA graphs for RECURRENT core calls: bucket choice, static buffers, capture and replay."""

from engine.graphs.buckets import GRAPH_MODES, Bucket, capture_sizes, choose_bucket
from engine.graphs.call_graphs import CallGraphs, cuda_capture, eager_capture
from engine.graphs.static_call import StaticCall

__all__ = [
    "GRAPH_MODES",
    "Bucket",
    "CallGraphs",
    "StaticCall",
    "capture_sizes",
    "choose_bucket",
    "cuda_capture",
    "eager_capture",
]
