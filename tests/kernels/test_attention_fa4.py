"""The ``flash_attn_4`` backend on the CPU: FA4 itself runs only on CUDA, so these tests check
what it would receive. Its arguments must describe the same rows and keys as the Triton
kernel's launch plan on the same batches, and a plain-torch emulation of FA4's documented
semantics (packed varlen queries, paged keys up to ``seqused_k``, causal aligned bottom-right)
over those arguments must give the torch reference's output. Shape limits fail at start."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from kernels.attention import AttentionShape, get_backend, resolve_backend
from kernels.attention.cases import make_case, poison_unused
from kernels.attention.flash_attn4 import FA4Args, FlashAttn4Backend, check_shape
from kernels.attention.torch_ref import TorchRefBackend
from kernels.attention.triton_plan import WORK_FIELDS, SplitPolicy, plan_launch

CASES = [
    ([5, 17, 1, 40], []),  # decode only
    ([], [(9, 9), (30, 7)]),  # prompts only, one with a prefix
    ([12, 3, 33], [(20, 20), (47, 13), (8, 1)]),  # mixed
]
BLOCK_SIZES = [4, 16]


def _rows_from_fa4(args: FA4Args) -> dict[int, tuple[int, int]]:
    """row -> (sequence, keys it sees), read off FA4's arguments."""
    cu, used = args.cu_seqlens_q.tolist(), args.seqused_k.tolist()
    rows = {}
    for s in range(len(used)):
        n = cu[s + 1] - cu[s]
        for i in range(n):  # bottom-right causal: query i of n sees used - n + i + 1 keys
            rows[cu[s] + i] = (s, used[s] - n + i + 1)
    return rows


def _rows_from_triton(ctx: tuple[int, ...], qlens: tuple[int, ...], num_decode: int,
                      group: int) -> dict[int, tuple[int, int]]:
    plan = plan_launch(ctx, qlens, num_decode, group=group, num_kv_heads=1, tile_n=16,
                       policy=SplitPolicy())
    rows = {s: (s, ctx[s]) for s in range(plan.num_decode)}  # decode program s: row s
    for t in range(plan.num_prompt_items):
        seq, row0, n, qpos0, _, _, _, _ = plan.work[t * WORK_FIELDS:(t + 1) * WORK_FIELDS]
        for j in range(n):
            assert row0 + j not in rows
            rows[row0 + j] = (seq, qpos0 + j + 1)
    return rows


def _emulate_fa4(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 args: FA4Args, scale: float) -> torch.Tensor:
    page_size = k_cache.shape[1]
    cu, used = args.cu_seqlens_q.tolist(), args.seqused_k.tolist()
    out = torch.zeros_like(q)
    for s in range(len(used)):
        n, nk = cu[s + 1] - cu[s], used[s]
        pages = args.page_table[s, :math.ceil(nk / page_size)].long()
        k = k_cache[pages].flatten(0, 1)[:nk].transpose(0, 1).float()
        v = v_cache[pages].flatten(0, 1)[:nk].transpose(0, 1).float()
        qs = q[cu[s]:cu[s + 1]].transpose(0, 1).float()
        mask = torch.arange(nk)[None, :] <= torch.arange(nk - n, nk)[:, None]
        rep = q.shape[1] // k_cache.shape[2]
        o = F.scaled_dot_product_attention(qs, k.repeat_interleave(rep, 0),
                                           v.repeat_interleave(rep, 0), attn_mask=mask,
                                           scale=scale)
        out[cu[s]:cu[s + 1]] = o.transpose(0, 1).to(q.dtype)
    return out


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize(("decode", "prompts"), CASES)
def test_fa4_arguments_match_the_triton_plan_and_the_reference(
        decode: list[int], prompts: list[tuple[int, int]], block_size: int) -> None:
    case = make_case(decode, prompts, num_heads=4, num_kv_heads=2, head_dim=16,
                     block_size=block_size, dtype=torch.float32, seed=len(prompts))
    meta = case.meta
    backend = FlashAttn4Backend(capability=(9, 0))
    backend.prepare(meta)
    args = meta.backend_state
    assert isinstance(args, FA4Args)
    for t in (args.cu_seqlens_q, args.seqused_k, args.page_table):
        assert t.dtype == torch.int32
    assert args.page_table.is_contiguous()
    assert args.cu_seqlens_q.tolist() == meta.query_start_loc.tolist()
    assert args.seqused_k.tolist() == list(meta.context_lens_host)
    width = args.page_table.shape[1]
    assert width * block_size >= meta.max_context_len > (width - 1) * block_size
    assert args.page_table.tolist() == meta.block_tables[:, :width].tolist()
    assert (args.max_seqlen_q, args.max_seqlen_k) == (meta.max_query_len, meta.max_context_len)
    fa4_rows = _rows_from_fa4(args)
    assert sorted(fa4_rows) == list(range(meta.num_rows))
    assert fa4_rows == _rows_from_triton(meta.context_lens_host, meta.query_lens_host,
                                         meta.num_decode_seqs, group=2)
    # FA4's semantics over these arguments give the reference's output (the reference on
    # clean caches; the emulation with NaN in every slot outside the contexts).
    scale = 0.25
    k_ref, v_ref = case.caches()
    ref = TorchRefBackend()
    ref.prepare(meta)
    expected = ref.forward(case.q, case.k, case.v, k_ref, v_ref, meta, scale)
    k_fa, v_fa = (poison_unused(c, case.used_slots) for c in case.caches())
    backend.write_kv(case.k, case.v, k_fa, v_fa, meta)
    torch.testing.assert_close(_emulate_fa4(case.q, k_fa, v_fa, args, scale), expected)


def test_shape_limits_fail_at_start_in_one_line() -> None:
    bf16 = torch.bfloat16
    check_shape(AttentionShape(16, 16, 128, bf16), (9, 0))  # Ouro-1.4B
    check_shape(AttentionShape(16, 16, 192, bf16), (9, 0))
    cases = [
        (AttentionShape(16, 16, 128, torch.float32), (9, 0), "runs float16 or bfloat16"),
        (AttentionShape(4, 2, 8, bf16), (9, 0), "divisible by 16, not 8"),
        (AttentionShape(16, 16, 192, bf16), (10, 0), "SM10x does not take head_dim 192"),
        (AttentionShape(6, 4, 64, bf16), (9, 0), "a multiple of num_kv_heads"),
    ]
    for shape, capability, fragment in cases:
        with pytest.raises(ValueError, match="^attention_backend: flash_attn_4") as err:
            FlashAttn4Backend(capability).configure(shape)
        assert fragment in str(err.value) and "\n" not in str(err.value)


def test_unavailable_here_is_a_one_line_error_and_auto_does_not_pick_it() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine may run FA4")
    with pytest.raises(ValueError, match="^attention_backend: 'flash_attn_4' is not available"):
        get_backend("flash_attn_4", AttentionShape(16, 16, 128, torch.bfloat16))
    assert resolve_backend("auto", "cuda") != "flash_attn_4"


def test_graph_key_covers_every_replay_of_a_bucket_and_refill_copies() -> None:
    backend = FlashAttn4Backend(capability=(9, 0))
    metas = []
    for seed, decode in enumerate(([5, 17, 1, 40], [9, 2, 30, 3])):
        case = make_case(decode, [], num_heads=4, num_kv_heads=2, head_dim=16, block_size=4,
                         dtype=torch.float32, seed=seed)
        tables = case.meta.block_tables  # the static buffers' width: 16 blocks
        case.meta.block_tables = F.pad(tables, (0, 16 - tables.shape[1]))
        backend.prepare(case.meta)
        metas.append(case.meta)
    keys = [backend.graph_key(m) for m in metas]
    assert keys[0] == keys[1] == (4, 4, 16, 1, 64)
    backend.refill(metas[0], metas[1])
    a, b = metas[0].backend_state, metas[1].backend_state
    assert isinstance(a, FA4Args) and isinstance(b, FA4Args)
    assert a.seqused_k.tolist() == [9, 2, 30, 3] and torch.equal(a.page_table, b.page_table)
