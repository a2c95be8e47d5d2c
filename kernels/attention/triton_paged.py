"""Triton kernels for packed paged attention over mixed decode/prompt batches.

``paged_attention`` is one launch for every sequence of a core call: its grid is (program,
KV head), a program being a tile of query rows of one sequence over one key range
(``triton_plan``). A program keeps every query head of its KV head's group in its M tile
(GQA: each K/V tile is read once for the group), walks its keys in tiles of ``tile_n``
looking each key's slot up through the sequence's block table (so any page size works),
and keeps an online softmax in fp32 (exp2 with the scale folded in). Causality and the
prefix offset come from each row's query position. Prompt tiles come from a work list;
decode programs find their sequence, row and keys from the program id and the device's
context lengths. Decode splits (long contexts) write unnormalised partials that
``combine`` merges. ``write_kv`` stores the call's K and V rows
at their slots in one launch.

Tensors: q/out [rows, heads, head_dim]; caches [blocks, block_size, kv_heads, head_dim]
(last dim contiguous); block tables [seqs, max_blocks] int64; context lengths and the
work list int64.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
NUM_STAGES = 3  # cp.async pipelining of the K/V tiles and the block-table loads (triton_aot)


@triton.jit
def _dot(a, b, SMALL: tl.constexpr, IEEE: tl.constexpr):
    """a [M, K] @ b [K, N] in fp32. The tensor cores need K >= 16: below (head_dim 8, the
    tiny model's) a broadcast product and sum instead."""
    if SMALL:
        out = tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], 1)
    elif IEEE:
        out = tl.dot(a, b, input_precision="ieee")
    else:
        out = tl.dot(a, b)
    return out


# Arguments whose value or alignment changes from call to call are not specialised on, so a
# serving run never stops to compile a kernel variant mid-run.
@triton.jit(do_not_specialize=["stride_bt", "num_prompt_items", "num_splits", "chunk"],
            do_not_specialize_on_alignment=["BT", "CTX", "WORK"])
def _paged_attention_kernel(
    Q, K, V, OUT, BT, CTX, WORK, PART_ACC, PART_M, PART_L,
    qk_scale,
    stride_qr, stride_qh, stride_or, stride_oh,
    stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
    stride_bt, num_heads, num_prompt_items, num_splits, chunk,
    BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
    HEAD_DIM: tl.constexpr, TILE_N: tl.constexpr, IEEE: tl.constexpr,
):
    item = tl.program_id(0)
    kvh = tl.program_id(1)
    if item < num_prompt_items:  # a prompt tile from the work list
        w = WORK + item * 8
        seq = tl.load(w).to(tl.int64)
        row0 = tl.load(w + 1).to(tl.int64)
        n_rows = tl.load(w + 2).to(tl.int64)
        pos0 = tl.load(w + 3).to(tl.int64)
        lo = tl.load(w + 4).to(tl.int64)
        hi = tl.load(w + 5).to(tl.int64)
        part = tl.full([], -1, tl.int64)
    else:  # split ``split`` of decode sequence ``seq`` (its row is ``seq``: decode rows first)
        d = (item - num_prompt_items).to(tl.int64)
        seq = d // num_splits
        ctx = tl.load(CTX + seq).to(tl.int64)
        row0 = seq
        n_rows = tl.full([], 1, tl.int64)
        pos0 = ctx - 1
        lo = (d - seq * num_splits) * chunk
        hi = tl.minimum(ctx, lo + chunk)
        part = tl.where(num_splits > 1, d, -1).to(tl.int64)

    m = tl.arange(0, BLOCK_M)
    qi = m // GROUP  # query row within the tile
    head = kvh * GROUP + m % GROUP
    row_ok = qi < n_rows
    d_idx = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + (row0 + qi)[:, None] * stride_qr + head[:, None] * stride_qh
                + d_idx[None, :], mask=row_ok[:, None], other=0.0)
    qpos = pos0 + qi

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    bt_row = BT + seq * stride_bt
    for start in range(lo, hi, TILE_N):
        n = start + tl.arange(0, TILE_N)
        n_ok = n < hi
        blk = tl.load(bt_row + n // BLOCK_SIZE, mask=n_ok, other=0)
        off = n % BLOCK_SIZE
        k = tl.load(K + (blk * stride_kb + off * stride_ks + kvh * stride_kh)[:, None]
                    + d_idx[None, :], mask=n_ok[:, None], other=0.0)
        v = tl.load(V + (blk * stride_vb + off * stride_vs + kvh * stride_vh)[:, None]
                    + d_idx[None, :], mask=n_ok[:, None], other=0.0)
        s = _dot(q, tl.trans(k), HEAD_DIM < 16, IEEE) * qk_scale
        visible = n_ok[None, :] & (n[None, :] <= qpos[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw nothing yet
        p = tl.exp2(s - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, HEAD_DIM < 16, IEEE)
        m_i = m_new

    if part < 0:
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(OUT + (row0 + qi)[:, None] * stride_or + head[:, None] * stride_oh
                 + d_idx[None, :], out.to(OUT.dtype.element_ty), mask=row_ok[:, None])
    else:  # unnormalised, for the combine kernel (an empty split leaves m=-inf, l=0)
        hrow = part * num_heads + head
        tl.store(PART_ACC + hrow[:, None] * HEAD_DIM + d_idx[None, :], acc,
                 mask=row_ok[:, None])
        tl.store(PART_M + hrow, m_i, mask=row_ok)
        tl.store(PART_L + hrow, l_i, mask=row_ok)


@triton.jit(do_not_specialize=["num_splits"])
def _combine_kernel(
    OUT, PART_ACC, PART_M, PART_L, stride_or, stride_oh, num_heads, num_splits,
    HEAD_DIM: tl.constexpr, MAX_SPLITS: tl.constexpr,
):
    row = tl.program_id(0)  # decode sequence = its output row
    h = tl.program_id(1)
    s = tl.arange(0, MAX_SPLITS)
    ok = s < num_splits
    idx = (row * num_splits + s) * num_heads + h
    mm = tl.load(PART_M + idx, mask=ok, other=float("-inf"))
    ll = tl.load(PART_L + idx, mask=ok, other=0.0)
    d = tl.arange(0, HEAD_DIM)
    acc = tl.load(PART_ACC + idx[:, None] * HEAD_DIM + d[None, :], mask=ok[:, None], other=0.0)
    top = tl.max(mm, 0)  # split 0 always holds keys, so finite
    wgt = tl.where(mm == float("-inf"), 0.0, tl.exp2(mm - top))
    out = tl.sum(acc * wgt[:, None], 0) / tl.sum(ll * wgt, 0)
    tl.store(OUT + row * stride_or + h * stride_oh + d, out.to(OUT.dtype.element_ty))


@triton.jit(do_not_specialize_on_alignment=["SLOT"])
def _write_kv_kernel(K, V, KC, VC, SLOT, stride_k, stride_v, ROW: tl.constexpr,
                     BLOCK: tl.constexpr):
    r = tl.program_id(0)
    i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = i < ROW
    slot = tl.load(SLOT + r)
    tl.store(KC + slot * ROW + i, tl.load(K + r * stride_k + i, mask=ok), mask=ok)
    tl.store(VC + slot * ROW + i, tl.load(V + r * stride_v + i, mask=ok), mask=ok)


def interpreted() -> bool:
    """Whether these kernels were built for Triton's CPU interpreter (TRITON_INTERPRET=1 was
    set when this module was imported)."""
    return type(_paged_attention_kernel).__name__ == "InterpretedFunction"


def _num_warps(block_m: int, head_dim: int) -> int:
    return 4 if block_m * head_dim <= 4096 else 8


def paged_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor,
    block_tables: torch.Tensor, context_lens: torch.Tensor, work: torch.Tensor,
    partials: tuple[torch.Tensor, torch.Tensor, torch.Tensor], scale: float, *,
    num_prompt_items: int, num_decode: int, num_splits: int, chunk: int, block_m: int,
    tile_n: int,
) -> None:
    """Attention of every prompt tile and decode split into ``out`` (or the partials)."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = k_cache.shape[2]
    acc, mx, lse = partials
    _paged_attention_kernel[(num_prompt_items + num_decode * num_splits, num_kv_heads)](
        q, k_cache, v_cache, out, block_tables, context_lens, work, acc, mx, lse,
        scale * LOG2E,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_tables.stride(0), num_heads, num_prompt_items, num_splits, chunk,
        BLOCK_SIZE=k_cache.shape[1], GROUP=num_heads // num_kv_heads, BLOCK_M=block_m,
        HEAD_DIM=head_dim, TILE_N=tile_n, IEEE=q.dtype == torch.float32,
        num_warps=_num_warps(block_m, head_dim), num_stages=NUM_STAGES,
    )


def combine(out: torch.Tensor, partials: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
            num_decode: int, num_splits: int, max_splits: int) -> None:
    """Merge each decode sequence's split partials into its output row."""
    acc, mx, lse = partials
    num_heads, head_dim = out.shape[1], out.shape[2]
    _combine_kernel[(num_decode, num_heads)](
        out, acc, mx, lse, out.stride(0), out.stride(1), num_heads, num_splits,
        HEAD_DIM=head_dim, MAX_SPLITS=max_splits, num_warps=4,
    )


def write_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """K and V rows [rows, kv_heads, head_dim] into their flat slots, one launch for both."""
    if k.stride(-1) != 1 or k.stride(-2) != k.shape[-1]:
        k = k.contiguous()
    if v.stride(-1) != 1 or v.stride(-2) != v.shape[-1]:
        v = v.contiguous()
    row = k.shape[1] * k.shape[2]
    block = min(triton.next_power_of_2(row), 4096)
    _write_kv_kernel[(k.shape[0], triton.cdiv(row, block))](
        k, v, k_cache, v_cache, slot_mapping, k.stride(0), v.stride(0), ROW=row, BLOCK=block,
        num_warps=4,
    )
