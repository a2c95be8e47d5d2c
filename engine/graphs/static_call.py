"""Static device buffers a captured core call reads, and their filling before each replay.

A captured graph reads fixed addresses, so every replay's inputs (hidden rows, positions, KV
write slots, block tables, context lengths, query starts) are copied into these buffers first,
padded to the bucket. Padding decode rows are length-1 sequences that write and read slot 0 of
a scratch KV block no request owns; trailing padding rows belong to no sequence and write that
same slot. No padding row is read back: ``gather_rows`` returns the real rows only.
"""

from __future__ import annotations

import torch

from engine.call_metadata import PreparedCall
from engine.graphs.buckets import Bucket
from kernels.attention import AttentionMetadata


class StaticCall:
    """Buffers for calls of up to ``max_rows`` rows and sequences; ``pad_block`` is the
    scratch KV block. The block-table width grows (doubling) when a call needs more columns;
    ``generation`` counts the growths, so graphs captured on an older table are not reused."""

    def __init__(self, max_rows: int, hidden_size: int, pad_block: int, block_size: int,
                 device: torch.device, dtype: torch.dtype, max_blocks: int = 64) -> None:
        self.max_rows = max_rows
        self.pad_block = pad_block
        self.block_size = block_size
        self.device = device
        i64 = torch.int64
        self.hidden = torch.zeros(max_rows, hidden_size, device=device, dtype=dtype)
        self.positions = torch.zeros(max_rows, device=device, dtype=i64)
        self.slot_mapping = torch.full((max_rows,), pad_block * block_size, device=device,
                                       dtype=i64)
        self.context_lens = torch.ones(max_rows, device=device, dtype=i64)
        self.query_start_loc = torch.arange(max_rows + 1, device=device, dtype=i64)
        self._steps = torch.arange(max_rows + 1, device=device, dtype=i64)
        self.block_tables = torch.full((max_rows, max(1, max_blocks)), pad_block, device=device,
                                       dtype=i64)
        self.generation = 0

    def _fit_width(self, columns: int) -> None:
        width = self.block_tables.shape[1]
        if columns > width:
            while width < columns:
                width *= 2
            self.block_tables = torch.full((self.max_rows, width), self.pad_block,
                                           device=self.device, dtype=torch.int64)
            self.generation += 1

    def fill(self, prep: PreparedCall, x: torch.Tensor, bucket: Bucket) -> AttentionMetadata:
        """Copy the call's rows into the buffers at the bucket's layout and return the padded
        metadata (views of the buffers; its backend state is still to be prepared)."""
        meta = prep.meta
        d, dp, rows = meta.num_decode_seqs, bucket.num_decode, bucket.num_rows
        num_prompt_rows = x.shape[0] - d
        p = meta.num_seqs - d  # prompt sequences
        end = dp + num_prompt_rows
        if end > rows or rows > self.max_rows or dp + p > self.max_rows:
            raise ValueError(f"cuda_graphs: a call of {d} decode and {num_prompt_rows} prompt "
                             f"rows does not fit bucket {bucket}")
        self._fit_width(meta.block_tables.shape[1])
        pad_slot = self.pad_block * self.block_size
        # rows: real decode | padding decode | real prompt | trailing padding
        for dst, src in ((self.hidden, x), (self.positions, prep.positions),
                         (self.slot_mapping, meta.slot_mapping)):
            dst[:d].copy_(src[:d])
            dst[dp:end].copy_(src[d:])
        self.positions[d:dp].zero_()
        self.positions[end:rows].zero_()
        self.slot_mapping[d:dp].fill_(pad_slot)
        self.slot_mapping[end:rows].fill_(pad_slot)
        # sequences: real decode | padding decode (context 1 on the pad block) | prompts
        width = meta.block_tables.shape[1]
        self.block_tables[:d, :width].copy_(meta.block_tables[:d])
        self.block_tables[dp:dp + p, :width].copy_(meta.block_tables[d:])
        self.block_tables[d:dp, 0].fill_(self.pad_block)
        self.context_lens[:d].copy_(meta.context_lens[:d])
        self.context_lens[d:dp].fill_(1)
        self.context_lens[dp:dp + p].copy_(meta.context_lens[d:])
        qsl = meta.query_start_loc
        self.query_start_loc[:d + 1].copy_(qsl[:d + 1])
        self.query_start_loc[d + 1:dp + 1].copy_(self._steps[d + 1:dp + 1])
        self.query_start_loc[dp + 1:dp + p + 1].copy_(qsl[d + 1:] + (dp - d))
        ctx, qlens = meta.context_lens_host, meta.query_lens_host
        n = dp + p
        return AttentionMetadata(
            slot_mapping=self.slot_mapping[:rows],
            block_tables=self.block_tables[:n],
            context_lens=self.context_lens[:n],
            query_start_loc=self.query_start_loc[:n + 1],
            block_size=meta.block_size,
            num_decode_seqs=dp,
            context_lens_host=ctx[:d] + (1,) * (dp - d) + ctx[d:],
            query_lens_host=qlens[:d] + (1,) * (dp - d) + qlens[d:],
        )

    @staticmethod
    def gather_rows(y: torch.Tensor, num_decode: int, num_prompt_rows: int,
                    bucket: Bucket) -> torch.Tensor:
        """The real rows of a padded output, in the eager call's row order (a copy: a graph's
        output buffer is overwritten by its next replay)."""
        dp = bucket.num_decode
        if not num_prompt_rows:
            return y[:num_decode].clone()
        return torch.cat([y[:num_decode], y[dp:dp + num_prompt_rows]])
