"""Bucket choice and static-buffer filling of captured core calls (plain host logic)."""

from __future__ import annotations

import pytest
import torch

from engine.call_metadata import PreparedCall
from engine.graphs import Bucket, StaticCall, capture_sizes, choose_bucket
from kernels.attention import AttentionMetadata


def test_capture_sizes_follow_vllm() -> None:
    assert capture_sizes(1) == [1]
    assert capture_sizes(6) == [1, 2, 4, 6]
    assert capture_sizes(40) == [1, 2, 4, 8, 16, 24, 32, 40]
    assert capture_sizes(20) == [1, 2, 4, 8, 16, 20]


def test_choose_bucket() -> None:
    sizes = capture_sizes(144)
    assert choose_bucket("off", 3, 0, sizes) is None
    assert choose_bucket("decode", 3, 0, sizes) == Bucket(4, 4)
    assert choose_bucket("decode", 8, 0, sizes) == Bucket(8, 8)
    assert choose_bucket("decode", 8, 128, sizes) is None  # prompt rows: eager
    assert choose_bucket("mixed", 8, 128, sizes) == Bucket(8, 136)
    assert choose_bucket("mixed", 5, 3, sizes) == Bucket(8, 16)
    assert choose_bucket("mixed", 0, 16, sizes) is None  # no decode rows: eager
    assert choose_bucket("mixed", 8, 137, sizes) is None  # past the largest size
    assert choose_bucket("decode", 145, 0, sizes) is None
    with pytest.raises(ValueError, match="^runner.cuda_graphs: 'on'; use one of"):
        choose_bucket("on", 1, 0, sizes)


def _call() -> tuple[PreparedCall, torch.Tensor]:
    """2 decode rows (ctx 5 and 9) and one prompt item of 3 rows (ctx 7), block size 4."""
    i64 = {"dtype": torch.int64}
    meta = AttentionMetadata(
        slot_mapping=torch.tensor([4, 40, 21, 22, 23], **i64),
        block_tables=torch.tensor([[3, 1, 0], [2, 6, 10], [4, 5, 0]], **i64),
        context_lens=torch.tensor([5, 9, 7], **i64),
        query_start_loc=torch.tensor([0, 1, 2, 5], **i64),
        block_size=4, num_decode_seqs=2, context_lens_host=(5, 9, 7), query_lens_host=(1, 1, 3),
    )
    positions = torch.tensor([4, 8, 4, 5, 6], **i64)
    return PreparedCall(positions, meta, [(0, 1), (1, 2), (2, 5)]), torch.arange(10.).view(5, 2)


def test_fill_pads_decode_rows_onto_the_scratch_block_and_trailing_rows_nowhere() -> None:
    prep, x = _call()
    static = StaticCall(16, 2, pad_block=99, block_size=4, device=torch.device("cpu"),
                        dtype=torch.float32, max_blocks=2)
    static.hidden.fill_(-1)
    meta = static.fill(prep, x, Bucket(4, 8))
    assert static.generation == 1 and static.block_tables.shape[1] == 4  # grew for 3 columns
    # rows: decode 0-1 | padding decode 2-3 | prompt 4-6 | trailing padding 7
    assert meta.slot_mapping.tolist() == [4, 40, 396, 396, 21, 22, 23, 396]
    assert static.positions[:8].tolist() == [4, 8, 0, 0, 4, 5, 6, 0]
    assert torch.equal(static.hidden[:2], x[:2]) and torch.equal(static.hidden[4:7], x[2:])
    assert meta.num_decode_seqs == 4
    assert meta.context_lens.tolist() == [5, 9, 1, 1, 7]
    assert meta.context_lens_host == (5, 9, 1, 1, 7) and meta.query_lens_host == (1, 1, 1, 1, 3)
    assert meta.query_start_loc.tolist() == [0, 1, 2, 3, 4, 7]
    assert meta.block_tables[:, :3].tolist() == [[3, 1, 0], [2, 6, 10], [99, 99, 99],
                                                 [99, 99, 99], [4, 5, 0]]
    y = static.hidden[:8] * 10
    real = StaticCall.gather_rows(y, 2, 3, Bucket(4, 8))
    assert torch.equal(real, x * 10)
    with pytest.raises(ValueError, match="does not fit bucket"):
        static.fill(prep, x, Bucket(4, 6))
