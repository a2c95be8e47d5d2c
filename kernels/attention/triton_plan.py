"""The Triton kernel's work list for one core call, planned on the host from host lengths.

Plain Python (no torch, no triton), so it is cheap and testable anywhere. One work item is
one program of the attention kernel (times ``num_kv_heads``): a tile of up to ``block_q``
query rows of one sequence, every query head of one KV head's group, over one key range.
Prompt tiles come first, longest key range first, so the heavy programs start early and a
decode-heavy batch never waits on one long prompt program; each decode sequence is one item,
or ``n`` items over consecutive key chunks (split-KV) when the call has too few programs to
fill the GPU, merged afterwards by the combine kernel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

WORK_FIELDS = 8  # seq, first row, rows, first query position, kv lo, kv hi, partial, pad
COMBINE_FIELDS = 4  # output row, first partial, number of partials, pad
MAX_SPLITS = 16
MIN_SPLIT_KEYS = 256  # a split chunk reads at least this many keys (below, the merge costs more)


@dataclass(frozen=True, slots=True)
class SplitPolicy:
    """When decode sequences are split along their keys (flash-decoding).

    ``target_programs``: programs wanted in flight (about 2 per SM); a call with fewer
    splits its decode sequences until it has about that many. 0 turns split-KV off.
    """

    target_programs: int = 0
    min_split_keys: int = MIN_SPLIT_KEYS
    max_splits: int = MAX_SPLITS


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """Flat int lists for the device plus the launch sizes."""

    work: list[int]  # num_items * WORK_FIELDS
    combine: list[int]  # num_combine * COMBINE_FIELDS
    num_parts: int  # partial results the split items write
    block_q: int  # query rows per tile (block_m // group)
    block_m: int

    @property
    def num_items(self) -> int:
        return len(self.work) // WORK_FIELDS

    @property
    def num_combine(self) -> int:
        return len(self.combine) // COMBINE_FIELDS


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def choose_block_m(group: int, max_query_len: int) -> int:
    """Rows of the kernel's M tile: query rows x the heads of one KV group. At least 16 (the
    tensor cores' smallest M); 64 for calls whose prompt rows need more. Two values only, so
    a model compiles two variants of the kernel, both in its warm-up."""
    small = max(16, _pow2_at_least(group))
    return small if max_query_len * group <= small else max(small, 64)


def _splits(ctx: int, want: float, policy: SplitPolicy, tile_n: int) -> tuple[int, int]:
    """(number of chunks, keys per chunk) for one decode sequence of ``ctx`` keys."""
    n = min(policy.max_splits, math.ceil(want), ctx // max(1, policy.min_split_keys))
    if n <= 1:
        return 1, ctx
    chunk = -(-ctx // n)
    chunk = -(-chunk // tile_n) * tile_n  # chunk boundaries on tile boundaries
    return -(-ctx // chunk), chunk


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
    """The work list of one core call (sequences in row order, decode sequences first)."""
    max_q = max(query_lens, default=1)
    bm = block_m or choose_block_m(group, max_q)
    bq = max(1, bm // group)
    prompt_items: list[tuple[int, list[int]]] = []
    row = sum(query_lens[:num_decode])
    for s in range(num_decode, len(query_lens)):
        ctx, n = context_lens[s], query_lens[s]
        prefix = ctx - n
        for q0 in range(0, n, bq):
            rows = min(bq, n - q0)
            hi = prefix + q0 + rows  # causal: the tile's last query sees keys < hi
            prompt_items.append((hi, [s, row + q0, rows, prefix + q0, 0, hi, -1, 0]))
        row += n
    prompt_items.sort(key=lambda it: -it[0])
    work = [v for _, item in prompt_items for v in item]
    programs = (len(prompt_items) + num_decode) * num_kv_heads
    want = policy.target_programs / programs if policy.target_programs and programs else 0.0
    combine: list[int] = []
    parts = 0
    for s in range(num_decode):
        ctx = context_lens[s]
        n, chunk = _splits(ctx, want, policy, tile_n) if want > 1 else (1, ctx)
        if n == 1:
            work += [s, s, 1, ctx - 1, 0, ctx, -1, 0]
            continue
        combine += [s, parts, n, 0]
        for i in range(n):
            work += [s, s, 1, ctx - 1, i * chunk, min(ctx, (i + 1) * chunk), parts + i, 0]
        parts += n
    return LaunchPlan(work, combine, parts, bq, bm)
