"""Packed paged attention (torch reference) over mixed batches equals dense attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from kernels.attention import AttentionMetadata, available_backends, get_backend, resolve_backend

BLOCK = 4
KV_HEADS, HEADS, HEAD_DIM = 2, 4, 8


def _case(device: str, dtype: torch.dtype, seed: int = 0):  # type: ignore[no-untyped-def]
    """Three decode sequences and two prompt sequences (one with a prefix), random paging."""
    gen = torch.Generator().manual_seed(seed)
    # (context_len, query_len): decode rows first.
    seqs = [(1, 1), (9, 1), (14, 1), (6, 6), (13, 5)]
    num_blocks = 40
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables, hist_k, hist_v = [], [], []
    for ctx, _ in seqs:
        nb = math.ceil(ctx / BLOCK) + 1  # longer than needed, like a lifetime reservation
        tables.append([perm.pop() for _ in range(nb)])
        hist_k.append(torch.randn(ctx, KV_HEADS, HEAD_DIM, generator=gen))
        hist_v.append(torch.randn(ctx, KV_HEADS, HEAD_DIM, generator=gen))
    k_cache = torch.randn(num_blocks, BLOCK, KV_HEADS, HEAD_DIM, generator=gen)
    v_cache = torch.randn(num_blocks, BLOCK, KV_HEADS, HEAD_DIM, generator=gen)
    slots, new_k, new_v, q = [], [], [], []
    for (ctx, n), table, hk, hv in zip(seqs, tables, hist_k, hist_v, strict=True):
        for p in range(ctx):
            s = table[p // BLOCK] * BLOCK + p % BLOCK
            if p < ctx - n:  # history already in the cache
                k_cache.view(-1, KV_HEADS, HEAD_DIM)[s] = hk[p]
                v_cache.view(-1, KV_HEADS, HEAD_DIM)[s] = hv[p]
            else:
                slots.append(s)
                new_k.append(hk[p])
                new_v.append(hv[p])
        q.append(torch.randn(n, HEADS, HEAD_DIM, generator=gen))
    max_nb = max(len(t) for t in tables)
    to = {"device": device}
    ctx_lens = [c for c, _ in seqs]
    q_lens = [n for _, n in seqs]
    meta = AttentionMetadata(
        slot_mapping=torch.tensor(slots, **to),
        block_tables=torch.tensor([t + [0] * (max_nb - len(t)) for t in tables], **to),
        context_lens=torch.tensor(ctx_lens, **to),
        query_start_loc=torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], **to),
        block_size=BLOCK, num_decode_seqs=3,
        context_lens_host=tuple(ctx_lens), query_lens_host=tuple(q_lens),
    )
    cast = {"device": device, "dtype": dtype}
    inputs = (torch.cat(q).to(**cast), torch.stack(new_k).to(**cast),
              torch.stack(new_v).to(**cast), k_cache.to(**cast), v_cache.to(**cast))
    return seqs, hist_k, hist_v, inputs, meta, tables


def _dense(seqs, hist_k, hist_v, q) -> torch.Tensor:  # type: ignore[no-untyped-def]
    out, row = [], 0
    for (ctx, n), hk, hv in zip(seqs, hist_k, hist_v, strict=True):
        qs = q[row:row + n].float().transpose(0, 1)  # [H, n, Dh]
        ks = hk.repeat_interleave(HEADS // KV_HEADS, dim=1).transpose(0, 1).to(qs)
        vs = hv.repeat_interleave(HEADS // KV_HEADS, dim=1).transpose(0, 1).to(qs)
        visible = torch.arange(ctx)[None, :] <= torch.arange(ctx - n, ctx)[:, None]
        out.append(F.scaled_dot_product_attention(
            qs, ks, vs, attn_mask=visible.to(qs.device)).transpose(0, 1))
        row += n
    return torch.cat(out)


def _check(device: str, dtype: torch.dtype, atol: float) -> None:
    seqs, hist_k, hist_v, (q, k, v, k_cache, v_cache), meta, _ = _case(device, dtype)
    backend = get_backend("torch")
    backend.prepare(meta)
    out = backend.forward(q, k, v, k_cache, v_cache, meta, HEAD_DIM**-0.5)
    assert out.dtype == dtype and out.shape == q.shape
    want = _dense(seqs, [h.to(dtype) for h in hist_k], [h.to(dtype) for h in hist_v], q)
    torch.testing.assert_close(out.float(), want.float(), atol=atol, rtol=atol)
    # The new rows' K/V landed in their slots.
    flat = k_cache.view(-1, KV_HEADS, HEAD_DIM)
    torch.testing.assert_close(flat[meta.slot_mapping], k)


def test_mixed_decode_and_prompt_sequences_match_dense_attention() -> None:
    _check("cpu", torch.float32, 1e-5)


def test_prompt_rows_are_causal_and_decode_rows_ignore_padding() -> None:
    _, _, _, (q, k, v, k_cache, v_cache), meta, tables = _case("cpu", torch.float32, 1)
    backend = get_backend("torch")
    backend.prepare(meta)
    base = backend.forward(q, k, v, k_cache, v_cache, meta, 0.3)
    # Changing the last prompt row's K/V must not affect earlier rows of that prompt, and
    # garbage in blocks beyond each context (padding) must change nothing.
    k2 = k.clone()
    k2[-1] += 5.0
    for table in tables:
        k_cache[table[-1]] = 1e4  # each table's spare block, beyond its context
    out = backend.forward(q, k2, v, k_cache, v_cache, meta, 0.3)
    torch.testing.assert_close(out[:-1], base[:-1])
    assert not torch.allclose(out[-1], base[-1])


def test_backend_registry() -> None:
    assert available_backends()[0] == "torch"  # triton: tests/kernels/test_attention_triton.py
    with pytest.raises(ValueError, match="'flash_attn' is not available"):
        get_backend("flash_attn")
    with pytest.raises(ValueError, match="unknown backend 'x'"):
        get_backend("x")
    assert resolve_backend("auto", "cpu") == "torch"
    assert resolve_backend("torch", "cuda") == "torch"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_mixed_batch_on_cuda_in_bf16() -> None:
    _check("cuda", torch.bfloat16, 3e-2)


def test_gqa_fallback_without_sdpa_enable_gqa(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch < 2.5 lacks enable_gqa: the backend repeats KV heads instead, same numbers.
    import kernels.attention.torch_ref as ref

    monkeypatch.setattr(ref, "_GQA", False)
    _check("cpu", torch.float32, 1e-5)
