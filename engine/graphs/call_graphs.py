"""Captured RECURRENT core calls, one graph per (bucket, launch shape), and their replay.

``CallGraphs.run`` takes a prepared eager call and returns its output rows, or None when the
call runs eager (no bucket, a backend that cannot capture, or the graph cap reached). The
capture function is injected: ``cuda_capture`` records a CUDA graph; ``eager_capture`` returns
a replay that runs the same forward on the same static buffers uncaptured, so everything but
the CUDA recording (buckets, padding, filling, the backend's replay state) runs on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch

from engine.call_metadata import PreparedCall
from engine.graphs.buckets import Bucket, choose_bucket
from engine.graphs.static_call import StaticCall
from kernels.attention import AttentionBackend, AttentionMetadata

Forward = Callable[[torch.Tensor, torch.Tensor, AttentionMetadata], torch.Tensor]
Replay = Callable[[], torch.Tensor]
Capture = Callable[[Replay], Replay]
MAX_GRAPHS = 64


def eager_capture(fn: Replay) -> Replay:
    """A "capture" that replays by running ``fn`` again (CPU tests; no CUDA)."""
    return fn


def cuda_capture() -> Capture:
    """Records ``fn`` into a CUDA graph after one warm run on a side stream (Triton compiles,
    the allocator settles); the graphs of one capture function share one memory pool (their
    outputs are copied out before the next replay)."""
    shared = torch.cuda.graph_pool_handle()

    def capture(fn: Replay) -> Replay:
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=shared):
            out = fn()

        def replay() -> torch.Tensor:
            graph.replay()
            return out

        return replay

    return capture


@dataclass(slots=True)
class _Graph:
    meta: AttentionMetadata  # the metadata captured (its backend state is refilled)
    replay: Replay


class CallGraphs:
    """Graphs of one runner's RECURRENT calls in ``mode`` (``decode`` or ``mixed``).

    ``forward(hidden, positions, meta)`` is the model's recurrent forward over the runner's
    KV cache. ``stats`` counts replays, captures and eager calls by reason (a backend that
    cannot capture says so once; its calls count as having no bucket after that).
    """

    def __init__(self, mode: str, sizes: Sequence[int], static: StaticCall,
                 backend: AttentionBackend, forward: Forward, capture: Capture,
                 max_graphs: int = MAX_GRAPHS) -> None:
        self.mode = mode
        self.sizes = list(sizes)
        self.static = static
        self.backend = backend
        self.forward = forward
        self.capture = capture
        self.max_graphs = max_graphs
        self._graphs: dict[Hashable, _Graph] = {}
        self._uncapturable = False  # the backend said so once: no more padded fills
        self.stats: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1

    def bucket(self, prep: PreparedCall, num_rows: int) -> Bucket | None:
        """The bucket this call replays in (None: eager)."""
        d = prep.meta.num_decode_seqs
        bucket = None if self._uncapturable or prep.meta.num_seqs > self.static.max_rows \
            else choose_bucket(self.mode, d, num_rows - d, self.sizes)
        if bucket is None:
            self._count("eager: no bucket")
        return bucket

    def run(self, prep: PreparedCall, x: torch.Tensor, bucket: Bucket) -> torch.Tensor | None:
        """The call's output rows via a graph of ``bucket``; None when it must run eager
        (``prep.meta`` is then still unprepared)."""
        meta = self.static.fill(prep, x, bucket)
        self.backend.prepare(meta)
        shape = self.backend.graph_key(meta)
        if shape is None:
            self._count(f"eager: {self.backend.name} does not capture")
            self._uncapturable = True
            return None
        key = (bucket, self.static.generation, shape)
        graph = self._graphs.get(key)
        if graph is None:
            if len(self._graphs) >= self.max_graphs:
                self._count("eager: graph cap reached")
                return None
            rows = bucket.num_rows
            hidden, positions = self.static.hidden[:rows], self.static.positions[:rows]

            def fn(meta: AttentionMetadata = meta) -> torch.Tensor:
                return self.forward(hidden, positions, meta)

            graph = self._graphs[key] = _Graph(meta, self.capture(fn))
            self._count("capture")
        else:
            self.backend.refill(graph.meta, meta)
        self._count("replay")
        d = prep.meta.num_decode_seqs
        return self.static.gather_rows(graph.replay(), d, x.shape[0] - d, bucket)

    def call(self, prep: PreparedCall, x: torch.Tensor) -> torch.Tensor:
        """The call's output rows: replayed from a graph, or eager when it has none."""
        bucket = self.bucket(prep, x.shape[0])
        y = None if bucket is None else self.run(prep, x, bucket)
        if y is None:
            self.backend.prepare(prep.meta)
            y = self.forward(x, prep.positions, prep.meta)
        return y

    @property
    def num_graphs(self) -> int:
        return len(self._graphs)
