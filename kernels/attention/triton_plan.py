"""The Triton kernel's launch plan for one core call, made on the host from host lengths.

Plain Python (no torch, no triton), so it is cheap and testable anywhere. The grid's first
axis lists programs (times ``num_kv_heads`` on the second): first one per prompt tile (up
to ``block_q`` query rows of one prompt sequence, longest key range first, so the heavy
programs start early), from a work list uploaded per call; then ``num_splits`` per decode
sequence, which the kernel derives from the device's context lengths alone, so a
decode-only call uploads nothing and its planning does not grow with the batch. With
``num_splits > 1`` (split-KV, flash-decoding) decode split ``i`` covers keys
``[i * chunk, (i + 1) * chunk)`` and the combine kernel merges the partial results.

The chunk is fixed (``SplitPolicy.split_keys``), not sized to the batch, so a decode row's
result never depends on which other rows share its call: the arms batch rows differently
and must still agree (a short row in a split call merges one chunk and empty ones, which
gives its unsplit bits exactly). Only contexts longer than ``max_splits`` chunks widen it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

WORK_FIELDS = 8  # seq, first row, rows, first query position, kv lo, kv hi, 2 x pad
MAX_SPLITS = 64
SPLIT_KEYS = 256  # keys per decode split on CUDA: 1 x 4096 fills 16 x 16 programs


@dataclass(frozen=True, slots=True)
class SplitPolicy:
    """How decode sequences are split along their keys (flash-decoding).

    ``split_keys``: keys per chunk (a multiple of the kernel's key tile); 0 turns split-KV
    off. ``max_splits``: chunks per sequence at most (a power of two: the combine tile).
    """

    split_keys: int = 0
    max_splits: int = MAX_SPLITS


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """The prompt work list (flat ints for the device) plus the launch sizes."""

    work: list[int]  # num_prompt_items * WORK_FIELDS
    num_decode: int
    num_splits: int  # programs per decode sequence
    chunk: int  # keys per decode split
    block_q: int  # query rows per prompt tile (block_m // group)
    block_m: int

    @property
    def num_prompt_items(self) -> int:
        return len(self.work) // WORK_FIELDS

    @property
    def num_programs(self) -> int:
        """Programs per KV head."""
        return self.num_prompt_items + self.num_decode * self.num_splits

    @property
    def num_parts(self) -> int:
        """Partial results the decode splits write (0 without split-KV)."""
        return self.num_decode * self.num_splits if self.num_splits > 1 else 0


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def choose_block_m(group: int, max_query_len: int) -> int:
    """Rows of the kernel's M tile: query rows x the heads of one KV group. At least 16 (the
    tensor cores' smallest M); 64 for calls whose prompt rows need more. Two values only, so
    a model compiles two variants of the kernel, both in its warm-up."""
    small = max(16, _pow2_at_least(group))
    return small if max_query_len * group <= small else max(small, 64)


def plan_launch(
    context_lens: Sequence[int],
    query_lens: Sequence[int],
    num_decode: int,
    *,
    group: int,
    num_kv_heads: int,
    tile_n: int,
    policy: SplitPolicy,
    block_m: int | None = None,
) -> LaunchPlan:
    """The plan of one core call (sequences in row order, decode sequences first)."""
    num_seqs = len(query_lens)
    max_q = max(query_lens[num_decode:], default=1)
    bm = block_m or choose_block_m(group, max_q)
    bq = max(1, bm // group)
    items: list[tuple[int, list[int]]] = []
    row = num_decode
    for s in range(num_decode, num_seqs):
        ctx, n = context_lens[s], query_lens[s]
        prefix = ctx - n
        for q0 in range(0, n, bq):
            rows = min(bq, n - q0)
            hi = prefix + q0 + rows  # causal: the tile's last query sees keys < hi
            items.append((hi, [s, row + q0, rows, prefix + q0, 0, hi, 0, 0]))
        row += n
    if len(items) > 1:
        items.sort(key=lambda it: -it[0])
    work = [v for _, item in items for v in item]
    splits, chunk = 1, 0
    if num_decode and policy.split_keys:
        longest = max(context_lens[:num_decode])
        chunk = math.ceil(policy.split_keys / tile_n) * tile_n  # chunks on tile boundaries
        if longest > chunk * policy.max_splits:
            chunk = math.ceil(math.ceil(longest / policy.max_splits) / tile_n) * tile_n
        splits = -(-longest // chunk)
        if splits == 1:
            chunk = 0
    return LaunchPlan(work, num_decode, splits, chunk, bq, bm)
