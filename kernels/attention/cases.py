"""Random packed paged batches for checking and timing the attention backends.

A case is a core call's worth of sequences, decode sequences (query length 1) first, then
prompt sequences ``(context_len, query_len)``, each on its own randomly placed blocks of one
shared cache, with random history already in the cache and random Q/K/V for the call's rows.
Used by the correctness tests, ``python -m kernels.attention.bench`` and the GPU check's kernel
stage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kernels.attention.base import AttentionMetadata, AttentionShape


@dataclass
class Case:
    """Inputs of one attention call; ``k_cache``/``v_cache`` hold the history (not the new rows)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    meta: AttentionMetadata
    shape: AttentionShape
    used_slots: torch.Tensor  # [num_blocks * block_size] bool: slots inside some context

    def caches(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh copies of the caches (a forward writes the new rows into them)."""
        return self.k_cache.clone(), self.v_cache.clone()

    @property
    def kv_bytes_read(self) -> int:
        """K and V bytes attention must read: every context position once per KV head."""
        s = self.shape
        per_pos = 2 * s.num_kv_heads * s.head_dim * self.k_cache.element_size()
        return sum(self.meta.context_lens_host) * per_pos

    @property
    def qo_bytes(self) -> int:
        return 2 * self.q.numel() * self.q.element_size()


def make_case(
    decode: Sequence[int],
    prompts: Sequence[tuple[int, int]] = (),
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    seed: int = 0,
    spare_blocks: int = 1,
) -> Case:
    """A batch of decode sequences (their context lengths) then prompt sequences
    ``(context_len, query_len)``."""
    device = torch.device(device)
    seqs = [(ctx, 1) for ctx in decode] + list(prompts)
    if not seqs:
        raise ValueError("a case needs at least one sequence")
    for ctx, n in seqs:
        if not 1 <= n <= ctx:
            raise ValueError(f"sequence ({ctx}, {n}): need 1 <= query_len <= context_len")
    num_decode = len(decode)
    gen = torch.Generator().manual_seed(seed)
    needed = [math.ceil(ctx / block_size) for ctx, _ in seqs]
    num_blocks = sum(needed) + spare_blocks * (len(seqs) + 1)
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables = [[perm.pop() for _ in range(nb + spare_blocks)] for nb in needed]
    slots: list[int] = []
    used: list[int] = []
    for (ctx, n), table in zip(seqs, tables, strict=True):
        flat = [table[p // block_size] * block_size + p % block_size for p in range(ctx)]
        used += flat
        slots += flat[ctx - n:]
    dev_gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*size: int) -> torch.Tensor:
        return torch.randn(size, generator=dev_gen, device=device, dtype=torch.float32).to(dtype)

    cache_shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache, v_cache = randn(*cache_shape), randn(*cache_shape)
    rows = sum(n for _, n in seqs)
    q = randn(rows, num_heads, head_dim)
    k, v = randn(rows, num_kv_heads, head_dim), randn(rows, num_kv_heads, head_dim)
    max_nb = max(needed)

    def ints(values: Sequence[int] | Sequence[Sequence[int]]) -> torch.Tensor:
        return torch.tensor(values, device=device, dtype=torch.int64)

    q_lens = [n for _, n in seqs]
    ctx_lens = [c for c, _ in seqs]
    starts = [0]
    for n in q_lens:
        starts.append(starts[-1] + n)
    meta = AttentionMetadata(
        slot_mapping=ints(slots),
        block_tables=ints([t[:max_nb] + [0] * (max_nb - len(t[:max_nb])) for t in tables]),
        context_lens=ints(ctx_lens),
        query_start_loc=ints(starts),
        block_size=block_size,
        num_decode_seqs=num_decode,
        context_lens_host=tuple(ctx_lens),
        query_lens_host=tuple(q_lens),
    )
    used_mask = torch.zeros(num_blocks * block_size, dtype=torch.bool, device=device)
    used_mask[ints(used)] = True
    shape = AttentionShape(num_heads, num_kv_heads, head_dim, dtype)
    return Case(q, k, v, k_cache, v_cache, meta, shape, used_mask)


def poison_unused(cache: torch.Tensor, used_slots: torch.Tensor) -> torch.Tensor:
    """``cache`` with NaN in every slot outside every context (a backend must never read
    them)."""
    flat = cache.view(-1, *cache.shape[2:])
    flat[~used_slots] = float("nan")
    return cache
