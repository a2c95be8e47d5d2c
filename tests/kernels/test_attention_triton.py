"""The Triton packed paged kernel equals the torch reference on mixed batches.

On a machine without a GPU the kernels run in Triton's CPU interpreter (tests/conftest.py
sets TRITON_INTERPRET=1), in fp32 and fp16; bf16 runs only on CUDA (the interpreter's bf16
dot is wrong), in the ``gpu`` test at the end. Tolerances: fp32 max |error| <= 1e-5;
fp16 (and bf16) relative error ||out - ref|| / ||ref|| <= 1e-3 (bf16 1e-2).
Every slot outside every context holds NaN, so a read outside its sequence shows.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.attention import AttentionShape, available_backends, get_backend
from kernels.attention.cases import Case, make_case, poison_unused
from kernels.attention.triton_backend import TritonBackend
from kernels.attention.triton_paged import interpreted
from kernels.attention.triton_plan import SplitPolicy

DEVICE = "cpu" if interpreted() or not torch.cuda.is_available() else "cuda"
SPLIT = SplitPolicy(split_keys=64)  # splits the test contexts (up to 300) into up to 5


def _run(case: Case, backend: TritonBackend, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(triton output, reference output); also checks the KV write and that no slot outside
    a context was read (they are NaN for the kernel)."""
    ref = get_backend("torch")
    ref.prepare(case.meta)
    k_ref, v_ref = case.caches()
    want = ref.forward(case.q, case.k, case.v, k_ref, v_ref, case.meta, scale)
    k_tri, v_tri = (poison_unused(c, case.used_slots) for c in case.caches())
    backend.configure(case.shape)
    backend.prepare(case.meta)
    got = backend.forward(case.q, case.k, case.v, k_tri, v_tri, case.meta, scale)
    assert got.shape == want.shape and got.dtype == want.dtype
    used = case.used_slots
    for tri, exp in ((k_tri, k_ref), (v_tri, v_ref)):
        assert torch.equal(tri.view(-1, *tri.shape[2:])[used], exp.view(-1, *exp.shape[2:])[used])
    return got, want


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    assert not got.isnan().any(), "the kernel read a slot outside a context, or left a row out"
    g, w = got.float(), want.float()
    if dtype == torch.float32:
        assert (g - w).abs().max().item() <= 1e-5
    else:
        limit = 1e-3 if dtype == torch.float16 else 1e-2
        assert ((g - w).norm() / w.norm()).item() <= limit


@st.composite
def _batches(draw: st.DrawFn) -> dict[str, object]:
    decode = draw(st.lists(st.integers(1, 300), max_size=8))
    prompts = draw(st.lists(st.integers(1, 300).flatmap(
        lambda ctx: st.tuples(st.just(ctx), st.integers(1, ctx))), min_size=0 if decode else 1,
        max_size=3))
    kv_heads, group = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 4]))
    return dict(decode=decode, prompts=prompts, num_kv_heads=kv_heads,
                num_heads=kv_heads * group, head_dim=draw(st.sampled_from([8, 16, 32, 64])),
                block_size=draw(st.sampled_from([4, 5, 16, 64])),
                dtype=draw(st.sampled_from([torch.float32, torch.float16])),
                seed=draw(st.integers(0, 2**16)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_batches(), st.booleans(), st.sampled_from(["triton", "index_copy"]))
def test_random_mixed_batches_match_the_reference(case_args: dict[str, object], split: bool,
                                                  kv_write: str) -> None:
    case = make_case(device=DEVICE, **case_args)  # type: ignore[arg-type]
    backend = TritonBackend(split=SPLIT if split else SplitPolicy(), kv_write=kv_write)
    got, want = _run(case, backend, case.shape.head_dim**-0.5)
    _close(got, want, case.shape.dtype)


EDGES = {
    "no prefix": ([], [(37, 37)]),
    "decode at context 1": ([1, 1, 9], [(20, 3)]),
    "prompt exactly filling a block": ([5], [(16, 16), (32, 16)]),
    "no decode part": ([], [(40, 8), (3, 1), (70, 70)]),
    "no prompt part": ([300, 2, 64, 65], []),
    "one row": ([1], []),
}


@pytest.mark.parametrize("name", list(EDGES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_edge_cases(name: str, dtype: torch.dtype) -> None:
    decode, prompts = EDGES[name]
    case = make_case(decode, prompts, num_heads=4, num_kv_heads=2, head_dim=16, block_size=16,
                     dtype=dtype, device=DEVICE, seed=3)
    for split in (SplitPolicy(), SPLIT):
        got, want = _run(case, TritonBackend(split=split), 0.25)
        _close(got, want, dtype)


@pytest.mark.parametrize("head_dim", [128, 256])
def test_large_head_dims(head_dim: int) -> None:
    case = make_case([70], [(50, 9)], num_heads=2, num_kv_heads=1, head_dim=head_dim,
                     block_size=16, dtype=torch.float16, device=DEVICE, seed=5)
    got, want = _run(case, TritonBackend(split=SPLIT), head_dim**-0.5)
    _close(got, want, torch.float16)


def test_split_kv_merges_the_partials() -> None:
    """A long decode context split into chunks gives what one program gives."""
    case = make_case([290, 260], [], num_heads=2, num_kv_heads=2, head_dim=16, block_size=8,
                     dtype=torch.float32, device=DEVICE, seed=7)
    got, want = _run(case, TritonBackend(split=SPLIT), 0.25)
    assert case.meta.backend_state.plan.num_splits > 2
    _close(got, want, torch.float32)


def test_unsupported_shapes_are_one_line_errors() -> None:
    def shape(**kw: object) -> AttentionShape:
        base: dict[str, object] = dict(num_heads=4, num_kv_heads=2, head_dim=16,
                                       dtype=torch.float32)
        return AttentionShape(**{**base, **kw})  # type: ignore[arg-type]

    for bad, match in ((shape(head_dim=96), "head_dim .* not 96"),
                       (shape(head_dim=4), "not 4"),
                       (shape(dtype=torch.float64), "float64"),
                       (shape(num_heads=3), "multiple of num_kv_heads")):
        with pytest.raises(ValueError, match=match) as err:
            TritonBackend().configure(bad)
        assert "\n" not in str(err.value)
    case = make_case([3], [], num_heads=4, num_kv_heads=2, head_dim=16, block_size=4,
                     dtype=torch.float32, device=DEVICE)
    backend = TritonBackend()
    with pytest.raises(ValueError, match="configure"):
        backend.prepare(case.meta)
    backend.shape = shape(head_dim=96)  # set without configure: prepare still refuses it
    with pytest.raises(ValueError, match="not 96"):
        backend.prepare(case.meta)
    backend.configure(case.shape)
    case.meta.block_size = 2048
    with pytest.raises(ValueError, match="cache.block_size: .* not 2048"):
        backend.prepare(case.meta)


def test_registry_lists_triton_only_where_it_can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    assert available_backends() == ["torch", "triton"]
    assert get_backend("triton").name == "triton"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert available_backends() == ["torch"]
    with pytest.raises(ValueError, match="'triton' is not available: no CUDA device .*"
                       "TRITON_INTERPRET=1") as err:
        get_backend("triton")
    assert "\n" not in str(err.value)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("split", [False, True])
def test_ouro_shapes_in_bf16_on_cuda(split: bool) -> None:
    case = make_case([1024] * 8 + [37], [(640, 128)], num_heads=16, num_kv_heads=16,
                     head_dim=128, block_size=16, dtype=torch.bfloat16, device="cuda")
    policy = SplitPolicy(split_keys=256) if split else SplitPolicy()
    got, want = _run(case, TritonBackend(split=policy), 1 / math.sqrt(128))
    _close(got, want, torch.bfloat16)


def _with_row0(case_seed: int, ctx: int, others: list[int], prompts: list[tuple[int, int]],
               split: SplitPolicy) -> torch.Tensor:
    """Row 0 rebuilt with one fixed history and query, whatever else is in the batch."""
    case = make_case([ctx, *others], prompts, num_heads=4, num_kv_heads=2, head_dim=16,
                     block_size=8, dtype=torch.float32, device=DEVICE, seed=case_seed)
    gen = torch.Generator().manual_seed(99)
    flat_k = case.k_cache.view(-1, 2, 16)
    flat_v = case.v_cache.view(-1, 2, 16)
    table = case.meta.block_tables[0].tolist()
    slots = [table[p // 8] * 8 + p % 8 for p in range(ctx)]
    flat_k[slots] = torch.randn(ctx, 2, 16, generator=gen).to(flat_k)
    flat_v[slots] = torch.randn(ctx, 2, 16, generator=gen).to(flat_v)
    case.q[0] = torch.randn(4, 16, generator=gen)
    case.k[0] = flat_k[slots[-1]]
    case.v[0] = flat_v[slots[-1]]
    got, want = _run(case, TritonBackend(split=split), 0.25)
    _close(got, want, torch.float32)
    return got[0]


def test_a_decode_rows_bits_do_not_depend_on_its_batch() -> None:
    """The arms batch rows differently and must agree exactly in fp32: a decode row's output
    is the same bits alone, beside longer rows (more splits in the call) and beside a
    prompt, with split-KV on and off."""
    for split in (SplitPolicy(), SPLIT):
        alone = _with_row0(1, 150, [], [], split)
        for seed, others, prompts in ((2, [290, 7], []), (3, [40], [(60, 20)]),
                                      (4, [], [(33, 33)])):
            assert torch.equal(_with_row0(seed, 150, others, prompts, split), alone), (
                split, others, prompts)
