"""Physical paged KV tensors: per layer, K and V of shape [num_blocks, block_size, kv_heads,
head_dim]. Blocks are global across depth planes; the core's BlockManager assigns them."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from engine.core.batch import FinalizeOp
from engine.core.block_manager import BlockManager
from engine.core.config import ModelShape
from engine.uploads import upload_ints


class KVCache:
    """The KV tensors of every layer, plus the finalize copy (docs/design.md)."""

    def __init__(
        self,
        shape: ModelShape,
        num_blocks: int,
        block_size: int,
        device: torch.device | str,
        dtype: torch.dtype,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_layers = shape.num_layers
        dims = (num_blocks, block_size, shape.num_kv_heads, shape.head_dim)
        self.k = [torch.zeros(dims, device=device, dtype=dtype) for _ in range(shape.num_layers)]
        self.v = [torch.zeros(dims, device=device, dtype=dtype) for _ in range(shape.num_layers)]

    @property
    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return list(zip(self.k, self.v, strict=True))

    @property
    def num_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def slot(self, table: list[int], position: int) -> int:
        """Flat slot of ``position`` in a plane with block table ``table``."""
        return table[position // self.block_size] * self.block_size + position % self.block_size

    def read(
        self, layer: int, table: list[int], position: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V ([kv_heads, head_dim]) stored at one position of one plane (for tests)."""
        s = self.slot(table, position)
        b, o = divmod(s, self.block_size)
        return self.k[layer][b, o], self.v[layer][b, o]

    def finalize(self, ops: Iterable[FinalizeOp], kv: BlockManager) -> int:
        """Copy each exited token's K/V (every layer, its position) from plane ``from_depth``
        into ``to_depths``. Ops of requests no longer holding KV are skipped (aborted: their
        blocks may already belong to someone else). Returns the number of slots copied."""
        src: list[int] = []
        dst: list[int] = []
        for op in ops:
            key = (op.request_id, op.generation)
            if not kv.holds(key):
                continue
            s = self.slot(kv.block_table(key, op.from_depth), op.position)
            for d in op.to_depths:
                src.append(s)
                dst.append(self.slot(kv.block_table(key, d), op.position))
        if not dst:
            return 0
        device = self.k[0].device
        src_t, dst_t = upload_ints(src, device), upload_ints(dst, device)
        for cache in self.k + self.v:
            flat = cache.view(-1, *cache.shape[2:])
            flat.index_copy_(0, dst_t, flat.index_select(0, src_t))
        return len(dst)
