"""Roofline cost model (the default): time per core call from bytes moved and FLOPs done.

Per core call (``Batch.core_call_items``):

- bytes = recurrent-core weights, read once per call (``ModelShape.core_params`` x dtype)
  + KV each item reads from its own depth plane (a decode row at position p: p + 1 positions;
  a prompt item over [s, s + n): its prefix plus causal part, s + n positions, streamed once)
  + KV the rows write (one position each) + the embedding gather of fused-prelude rows;
  one KV position is 2 x num_layers x num_kv_heads x head_dim x dtype bytes;
- FLOPs = 2 x core_params per row (GEMMs) + 4 x context x num_heads x head_dim x num_layers
  per row (QK^T and PV), where a prompt row i attends to s + i + 1 positions;
- time = max(bytes / bandwidth, FLOPs / matmul throughput) + host overhead per call.

A PRELUDE step is an embedding gather, a CODA step lm_head (hidden x vocab weights read once,
2 x hidden x vocab FLOPs per row) plus sampling. Every step adds the scheduler's per-step
overhead and the finalize copies its housekeeping carries (one KV position per target plane,
read and written); a recurrent step that reads exit signals back adds the preset's
``readback_s`` (RFC §4). Activation traffic is ignored: it is small next to the weights for the
chunk sizes the scenarios use.
"""

from __future__ import annotations

from engine.core.batch import Batch, FinalizeOp, ItemKind, ScheduledItem
from engine.core.config import ModelShape
from engine.core.request import Stage
from sim.cost.base import HardwarePreset, StepContext, item_context


class RooflineCost:
    """Roofline of one model shape on one hardware preset."""

    def __init__(self, model: ModelShape, hardware: HardwarePreset, dtype_bytes: int) -> None:
        if dtype_bytes not in (1, 2, 4):
            raise ValueError(f"cost.dtype_bytes: must be 1, 2 or 4, got {dtype_bytes!r}")
        self.model = model
        self.hardware = hardware
        self.dtype_bytes = dtype_bytes
        m = model
        self._bw = hardware.mem_bw_bytes_s
        self._flops = hardware.matmul_flops_s
        self.weight_bytes = m.core_params * dtype_bytes
        self.kv_position_bytes = 2 * m.num_layers * m.num_kv_heads * m.head_dim * dtype_bytes
        self.embed_row_bytes = m.hidden_size * dtype_bytes
        self.gemm_flops_per_row = 2 * m.core_params
        self.attn_flops_per_context = 4 * m.num_heads * m.head_dim * m.num_layers
        self.lm_head_bytes = m.hidden_size * m.vocab_size * dtype_bytes
        self.lm_head_flops_per_row = 2 * m.hidden_size * m.vocab_size
        self.host_call_s = hardware.host_call_s + hardware.host_layer_s * m.num_layers
        self.weights_s = self.weight_bytes / self._bw

    def step_time(self, ctx: StepContext) -> float:
        return self.batch_time(ctx.batch)

    def batch_time(self, batch: Batch) -> float:
        """``step_time`` of ``batch`` (the roofline reads nothing else of a context): the
        same doubles as ``breakdown(batch)["total_s"]``, from the same operations in the same
        order, with each item's context (``item_context``, written out: no tuple) summed in
        one pass over the items."""
        hw = self.hardware
        total = hw.step_overhead_s
        ops = batch.housekeeping.finalize
        if ops:  # adding no copies' 0.0 leaves the (positive) total as it is
            total += self._finalize_s(ops)
        stage = batch.stage
        if stage is Stage.PRELUDE:
            embed = 2 * len(batch.items) * self.embed_row_bytes / self._bw
            return total + (embed + self.host_call_s)
        if stage is Stage.CODA:
            rows = len(batch.items)
            mem = (self.lm_head_bytes + rows * self.embed_row_bytes) / self._bw
            comp = rows * self.lm_head_flops_per_row / self._flops
            return total + ((comp if comp > mem else mem) + self.host_call_s + hw.sampling_s)
        if batch.needs_signals:
            total += hw.readback_s
        num_calls = batch.num_core_calls
        if num_calls == 1:
            rows = kv_tokens = ctx_sum = fused_rows = 0
            for item in batch.items:
                if item.num_depths < 1:
                    continue
                n = item.num_tokens
                if item.kind is ItemKind.DECODE:
                    c = item.position + 1
                    kv_tokens += c
                    ctx_sum += c
                else:
                    s = item.position
                    kv_tokens += s + n
                    ctx_sum += n * s + n * (n + 1) // 2
                rows += n
                if item.fused_prelude:
                    fused_rows += n
            return total + self._call_s(rows, kv_tokens, ctx_sum, fused_rows)
        if num_calls > 1:
            return self._calls_s(total, batch.items, num_calls)
        return total

    def _calls_s(self, total: float, items: tuple[ScheduledItem, ...], num_calls: int) -> float:
        """``total`` plus each of ``num_calls`` core calls in call order (an atomic PREFILL
        step, a prompt shortcut): an item runs in calls 0 .. num_depths - 1, so the sums of
        call k are those of the items with more than k depths."""
        rows_at = [0] * (num_calls + 1)  # by num_depths, then summed from the deepest down
        kv_at = [0] * (num_calls + 1)
        ctx_at = [0] * (num_calls + 1)
        fused_rows = 0
        for item in items:
            d = item.num_depths
            if d < 1:
                continue
            n = item.num_tokens
            s = item.position
            rows_at[d] += n
            if item.kind is ItemKind.DECODE:
                kv_at[d] += s + 1
                ctx_at[d] += s + 1
            else:
                kv_at[d] += s + n
                ctx_at[d] += n * s + n * (n + 1) // 2
            if item.fused_prelude:  # its prelude runs in its first call
                fused_rows += n
        for d in range(num_calls - 1, 0, -1):
            rows_at[d] += rows_at[d + 1]
            kv_at[d] += kv_at[d + 1]
            ctx_at[d] += ctx_at[d + 1]
        for k in range(num_calls):
            total += self._call_s(rows_at[k + 1], kv_at[k + 1], ctx_at[k + 1],
                                  fused_rows if k == 0 else 0)
        return total

    def _call_s(self, rows: int, kv_tokens: int, ctx_sum: int, fused_rows: int) -> float:
        """One core call: roofline of its bytes and FLOPs plus the host overhead."""
        mem = self.weights_s + (
            (kv_tokens + rows) * self.kv_position_bytes + 2 * fused_rows * self.embed_row_bytes
        ) / self._bw
        comp = (rows * self.gemm_flops_per_row + ctx_sum * self.attn_flops_per_context) / (
            self._flops
        )
        return (mem if mem > comp else comp) + self.host_call_s

    def _finalize_s(self, ops: tuple[FinalizeOp, ...]) -> float:
        copies = 0
        for op in ops:
            copies += len(op.to_depths)
        return 2 * copies * self.kv_position_bytes / self._bw

    def breakdown(self, batch: Batch) -> dict[str, float]:
        terms = dict.fromkeys(
            ("weights_s", "kv_s", "embed_s", "lm_head_s", "gemm_s", "attention_s",
             "memory_s", "compute_s", "host_s", "sampling_s", "finalize_s",
             "step_overhead_s", "readback_s"),
            0.0,
        )
        terms["total_s"] = self._cost(batch, terms)
        return terms

    def _cost(self, batch: Batch, terms: dict[str, float] | None) -> float:
        """The step's price, call by call over ``Batch.core_call_items`` (``breakdown``'s
        reference; ``batch_time`` sums the same terms in one pass)."""
        hw = self.hardware
        bw = self._bw
        total = hw.step_overhead_s
        finalize_s = self._finalize_s(batch.housekeeping.finalize)
        total += finalize_s
        if terms is not None:
            terms["step_overhead_s"] = hw.step_overhead_s
            terms["finalize_s"] = finalize_s
        stage = batch.stage
        if stage is Stage.PRELUDE:
            embed = 2 * len(batch.items) * self.embed_row_bytes / bw
            total += embed + self.host_call_s
            if terms is not None:
                terms["embed_s"] = embed
                terms["memory_s"] = embed
                terms["host_s"] = self.host_call_s
            return total
        if stage is Stage.CODA:
            rows = len(batch.items)
            mem = (self.lm_head_bytes + rows * self.embed_row_bytes) / bw
            comp = rows * self.lm_head_flops_per_row / self._flops
            total += max(mem, comp) + self.host_call_s + hw.sampling_s
            if terms is not None:
                terms["lm_head_s"] = max(mem, comp)
                terms["memory_s"] = mem
                terms["compute_s"] = comp
                terms["host_s"] = self.host_call_s
                terms["sampling_s"] = hw.sampling_s
            return total
        if batch.needs_signals:
            total += hw.readback_s
            if terms is not None:
                terms["readback_s"] = hw.readback_s
        items = batch.items
        for k in range(batch.num_core_calls):  # the items of each call: Batch.core_call_items
            rows = kv_tokens = ctx_sum = fused_rows = 0
            for item in items:
                if k >= item.num_depths:
                    continue
                n = item.num_tokens
                kv, ctx, _ = item_context(item)
                rows += n
                kv_tokens += kv
                ctx_sum += ctx
                if k == 0 and item.fused_prelude:  # its prelude runs in its first call
                    fused_rows += n
            total += self._call_s(rows, kv_tokens, ctx_sum, fused_rows)
            if terms is not None:
                kv_bytes = (kv_tokens + rows) * self.kv_position_bytes
                embed_bytes = 2 * fused_rows * self.embed_row_bytes
                mem = self.weights_s + (kv_bytes + embed_bytes) / bw
                gemm = rows * self.gemm_flops_per_row / self._flops
                attn = ctx_sum * self.attn_flops_per_context / self._flops
                terms["weights_s"] += self.weights_s
                terms["kv_s"] += kv_bytes / bw
                terms["embed_s"] += embed_bytes / bw
                terms["memory_s"] += mem
                terms["gemm_s"] += gemm
                terms["attention_s"] += attn
                terms["compute_s"] += gemm + attn
                terms["host_s"] += self.host_call_s
        return total
