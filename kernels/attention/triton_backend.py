"""The ``triton`` attention backend: the packed paged kernel behind ``AttentionBackend``.

``prepare`` plans the call on the host from the host lengths (``triton_plan``) and uploads
its prompt work list, if any (decode programs need none); every layer's ``forward`` launches
the KV write and one attention kernel (plus the combine kernel when decode sequences were
split), and reads nothing back. Runs on CUDA, or on the CPU under ``TRITON_INTERPRET=1``
(Triton's interpreter: slow, for tests).
"""

from __future__ import annotations

import array
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from kernels.attention import triton_paged
from kernels.attention.base import AttentionBackend, AttentionMetadata, AttentionShape
from kernels.attention.triton_plan import SPLIT_KEYS, LaunchPlan, SplitPolicy, plan_launch

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HEAD_DIMS = (8, 16, 32, 64, 128, 256)
MAX_BLOCK_SIZE = 1024
UNSPLIT_CHUNK = 1 << 30  # the chunk of unsplit decode programs in a captured call


def check_shape(shape: AttentionShape) -> None:
    """One-line ValueError for a shape the kernel cannot serve."""
    if shape.head_dim not in HEAD_DIMS:
        raise ValueError(f"attention_backend: triton needs head_dim in {HEAD_DIMS}, not "
                         f"{shape.head_dim}; use attention_backend: torch")
    if shape.dtype not in DTYPES:
        raise ValueError(f"attention_backend: triton runs float32, float16 or bfloat16, not "
                         f"{shape.dtype}; set runner.dtype")
    if shape.num_kv_heads < 1 or shape.num_heads % shape.num_kv_heads:
        raise ValueError(f"attention_backend: triton needs num_heads ({shape.num_heads}) a "
                         f"multiple of num_kv_heads ({shape.num_kv_heads})")


def check_block_size(block_size: int) -> None:
    if not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise ValueError(f"cache.block_size: triton attention takes 1 to {MAX_BLOCK_SIZE}, not "
                         f"{block_size}")


def _upload(values: Sequence[int], device: torch.device) -> torch.Tensor:
    """int64 on ``device`` without a host sync (pinned staging, as engine.uploads does)."""
    host = torch.frombuffer(array.array("q", values), dtype=torch.int64)
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


@dataclass(slots=True)
class _TritonState:
    plan: LaunchPlan
    work: torch.Tensor  # the prompt tiles (a placeholder when there are none)
    partials: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    tile_n: int
    chunk: int
    max_splits: int  # the combine kernel's split tile (a power of two)


class TritonBackend(AttentionBackend):
    """One attention launch per layer for every sequence of a core call.

    ``split``: the split-KV policy (None: chunks of ``SPLIT_KEYS`` on CUDA; off on the CPU
    interpreter, where more programs only cost time). ``kv_write``: ``triton`` (one launch for K
    and V) or ``index_copy`` (two ``index_copy_``). ``block_m`` / ``tile_n`` override the tile
    sizes (tests, bench).
    """

    name = "triton"

    def __init__(self, *, split: SplitPolicy | None = None, kv_write: str = "triton",
                 block_m: int | None = None, tile_n: int | None = None) -> None:
        if kv_write not in ("triton", "index_copy"):
            raise ValueError(f"kv_write: 'triton' or 'index_copy', not {kv_write!r}")
        self.split = split
        self.kv_write = kv_write
        self.block_m = block_m
        self.tile_n = tile_n
        # Split-KV scratch, grown as needed and reused by every call (stream order keeps
        # one call's partials from meeting the next's).
        self._scratch: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def configure(self, shape: AttentionShape) -> None:
        check_shape(shape)
        self.shape = shape

    def _policy(self, device: torch.device) -> SplitPolicy:
        if self.split is not None:
            return self.split
        return SplitPolicy(SPLIT_KEYS) if device.type == "cuda" else SplitPolicy()

    def _partials(self, device: torch.device, parts: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        held = self._scratch.get(device)
        if held is None or held[1].shape[0] < parts:
            assert self.shape is not None
            heads, dim, n = self.shape.num_heads, self.shape.head_dim, max(1, parts)
            f32 = {"device": device, "dtype": torch.float32}
            held = self._scratch[device] = (torch.empty(n, heads, dim, **f32),
                                            torch.empty(n, heads, **f32),
                                            torch.empty(n, heads, **f32))
        return held

    def prepare(self, meta: AttentionMetadata) -> None:
        shape = self.shape
        if shape is None:
            raise ValueError("attention_backend: triton needs the model's shape; call "
                             "configure(AttentionShape(...)) before prepare")
        check_shape(shape)  # configure checked it too; a shape set by hand is caught here
        check_block_size(meta.block_size)
        device = meta.block_tables.device
        if device.type != "cuda" and not triton_paged.interpreted():
            raise ValueError("attention_backend: triton on the CPU needs TRITON_INTERPRET=1 set "
                             "before kernels.attention.triton_paged is imported")
        tile_n = self.tile_n or (64 if shape.head_dim <= 128 else 32)
        policy = self._policy(device)
        plan = plan_launch(
            meta.context_lens_host, meta.query_lens_host, meta.num_decode_seqs,
            group=shape.num_heads // shape.num_kv_heads, num_kv_heads=shape.num_kv_heads,
            tile_n=tile_n, policy=policy, block_m=self.block_m,
        )
        # Decode programs need no list; with split-KV off, one chunk spans every context.
        work = _upload(plan.work, device) if plan.work else meta.context_lens
        chunk = plan.chunk or max(meta.context_lens_host, default=1)
        max_splits = 1 << max(0, policy.max_splits - 1).bit_length()
        meta.backend_state = _TritonState(plan, work, self._partials(device, plan.num_parts),
                                          tile_n, chunk, max_splits)

    def graph_key(self, meta: AttentionMetadata) -> Hashable | None:
        state = meta.backend_state
        if not isinstance(state, _TritonState):
            raise RuntimeError("triton attention: prepare(meta) was not called for this core call")
        plan = state.plan
        if plan.num_splits == 1:
            # One split covers keys [0, min(ctx, chunk)): any chunk past every context gives
            # the same result, so the captured scalar holds for every later context.
            state.chunk = UNSPLIT_CHUNK
        return (plan.num_decode, plan.num_prompt_items, plan.num_splits, state.chunk,
                plan.block_m, state.tile_n, state.max_splits, state.partials[0].data_ptr())

    def refill(self, captured: AttentionMetadata, meta: AttentionMetadata) -> None:
        old, new = captured.backend_state, meta.backend_state
        assert isinstance(old, _TritonState) and isinstance(new, _TritonState)
        if new.plan.num_prompt_items:
            old.work.copy_(new.work)

    def write_kv(self, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                 v_cache: torch.Tensor, meta: AttentionMetadata) -> None:
        if self.kv_write == "index_copy":
            super().write_kv(k, v, k_cache, v_cache, meta)
        else:
            triton_paged.write_kv(k, v, k_cache, v_cache, meta.slot_mapping)

    def attend(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
               meta: AttentionMetadata, scale: float) -> torch.Tensor:
        state = meta.backend_state
        if not isinstance(state, _TritonState):
            raise RuntimeError("triton attention: prepare(meta) was not called for this core call")
        if q.dtype != k_cache.dtype:
            raise ValueError(f"triton attention: q is {q.dtype} but the KV cache {k_cache.dtype}")
        if q.stride(-1) != 1:
            q = q.contiguous()
        out = torch.empty_like(q)
        plan = state.plan
        triton_paged.paged_attention(
            q, k_cache, v_cache, out, meta.block_tables, meta.context_lens, state.work,
            state.partials, scale, num_prompt_items=plan.num_prompt_items,
            num_decode=plan.num_decode, num_splits=plan.num_splits, chunk=state.chunk,
            block_m=plan.block_m, tile_n=state.tile_n,
        )
        if plan.num_parts:
            triton_paged.combine(out, state.partials, plan.num_decode, plan.num_splits,
                                 state.max_splits)
        return out
