"""ModelRunner: executes the core's batches with torch on CPU or CUDA (docs/design.md).

``engine.call_metadata.prepare_call`` builds every row's metadata (position, depth plane,
block table, context length, write slot) for a core call; a RECURRENT call packs decode rows
(first) and prompt rows, a PREFILL step chains its core calls through the depths. Hidden state
lives in two runner-owned pools: prompt items' [chunk, hidden] slots behind the core's handles,
and each running request's one-row decode state.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from engine.block_tables import DeviceBlockTables
from engine.call_metadata import CallPairs, PreparedCall, prepare_call
from engine.core.batch import Batch, Housekeeping, ItemKind, ScheduledItem
from engine.core.block_manager import BlockManager
from engine.core.config import EngineConfig, ExitConfig
from engine.core.engine_core import EngineCore
from engine.core.request import Request, SamplingParams, Stage
from engine.core.results import CodaResult, RecurrentResult, StepResult
from engine.exit_signals import exit_signals
from engine.graphs.build import CallGraphs, Capture, GraphSettings, build_call_graphs
from engine.kv_cache import KVCache
from engine.live_items import expand_result, live_items
from engine.model.alloc import default_dtype
from engine.model.lookahead import LookaheadHead, LookaheadHeads
from engine.model.ouro import OuroForCausalLM
from engine.penalties import token_histories
from engine.readback import Readbacks
from engine.sampling import Logprobs, sample
from engine.state_buffers import DecodeStateBuffers, PromptStateBuffers
from engine.uploads import upload_ints
from kernels.attention import AttentionShape, get_backend, resolve_backend

ParamsFn = Callable[[str, int], SamplingParams | None]
HiddenHook = Callable[[ScheduledItem, int, torch.Tensor], None]


class ModelRunner:
    """Runs batches of one ``EngineCore`` on a device.

    ``bind(core)`` attaches the core whose block tables and sampling params the runner
    reads (the drivers call it; a runner can serve one core after another). Set
    ``fail_on_step`` to a step id to make that batch raise (tests); ``hidden_hook`` sees every
    item's output rows after each depth.
    """

    def __init__(
        self,
        model: OuroForCausalLM,
        engine_cfg: EngineConfig,
        block_manager: BlockManager | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
        attention_backend: str = "auto",
        *,
        seed: int = 0,
        sync_steps: bool = False,
        cuda_graphs: str = "off", graph_capture: Capture | None = None,
    ) -> None:
        shape = model.config.to_shape()
        if shape != engine_cfg.model:
            raise ValueError(
                f"model: runner model shape {shape} differs from config {engine_cfg.model}")
        self.model = model
        self.device = torch.device(device)
        self.dtype = dtype or default_dtype(self.device)
        # auto: triton on CUDA, torch elsewhere; ``backend.name`` is the one in use.
        self.backend = get_backend(
            resolve_backend(attention_backend, self.device),
            AttentionShape(shape.num_heads, shape.num_kv_heads, shape.head_dim, self.dtype),
        )
        self.seed = seed
        self.graph_settings = GraphSettings.checked(cuda_graphs, self.device, graph_capture)
        # Wait for the device at the end of every step, so step end times are device times
        # (profiling, calibration). Off by default: the eager loop then syncs only where it
        # reads results back (gate signals, sampled tokens).
        self.sync_steps = sync_steps
        self.num_depths = shape.num_depths
        self.block_manager = block_manager
        self.params_fn: ParamsFn | None = None
        self.requests: dict[str, Request] | None = None  # the bound core's unfinished requests
        self.fail_on_step: int | None = None
        self.hidden_hook: HiddenHook | None = None
        self.last_prepare_s = 0.0  # host time in _prepare_batch during the last execute
        self.readbacks = Readbacks()  # device -> host copies (last_step: the last execute's)
        self._head = LookaheadHeads(model.config.hidden_size, self.device)  # by seed
        self.cfg = engine_cfg
        self._allocate(engine_cfg)

    # ---- lifecycle -----------------------------------------------------------------------
    def _allocate(self, cfg: EngineConfig) -> None:
        cache = cfg.cache
        extra = self.graph_settings.scratch_blocks  # the graphs' padding rows write there
        self.kv_cache = KVCache(cfg.model, cache.num_blocks + extra, cache.block_size,
                                self.device, self.dtype)
        self._allocate_states(cfg)

    def _allocate_states(self, cfg: EngineConfig) -> None:
        sched, hidden = cfg.scheduler, cfg.model.hidden_size
        planes = cfg.cache.num_planes(cfg.model.num_depths)
        self._tables = DeviceBlockTables(sched.max_num_seqs * planes, 64, self.device)
        self.prompt_states = PromptStateBuffers(
            cfg.max_prompt_states, sched.effective_chunk_size, hidden, self.device, self.dtype
        )
        self.decode_states = DecodeStateBuffers(sched.max_num_seqs, hidden, self.device, self.dtype)
        self.graphs: CallGraphs | None = build_call_graphs(
            self.graph_settings, cfg, self.model, self.kv_cache, self.backend)

    def bind(self, core: EngineCore) -> None:
        """Serve ``core`` from now on: its block manager and request params; fresh state
        pools (the KV tensors are reused when the cache geometry is unchanged)."""
        if core.cfg.model != self.cfg.model:
            raise ValueError("model: the core's model shape differs from the runner's model")
        old, self.cfg = self.cfg.cache, core.cfg
        new = core.cfg.cache
        if (old.num_blocks, old.block_size) == (new.num_blocks, new.block_size):
            self._allocate_states(self.cfg)
        else:
            self._allocate(self.cfg)
        self.block_manager = core.block_manager
        requests = self.requests = core.requests

        def params(request_id: str, generation: int) -> SamplingParams | None:
            req = requests.get(request_id)
            return req.params if req is not None and req.generation == generation else None

        self.params_fn = params

    def release(self, housekeeping: Housekeeping) -> None:
        """Apply finalize copies, then free released prompt states and request states."""
        if housekeeping.finalize:
            self.kv_cache.finalize(housekeeping.finalize, self._bound_block_manager())
        for handle in housekeeping.released_handles:
            self.prompt_states.release(handle)
        for key in housekeeping.released_requests:
            self.decode_states.release(key)

    # ---- execute -------------------------------------------------------------------------
    def execute(self, batch: Batch) -> StepResult:
        """Run ``batch`` (housekeeping first) and return the result its stage calls for."""
        result = self._execute(batch)
        if self.sync_steps and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return result

    @torch.inference_mode()
    def _execute(self, batch: Batch) -> StepResult:
        self.release(batch.housekeeping)
        self.last_prepare_s = 0.0
        self.readbacks.start_step()
        if self.fail_on_step is not None and batch.step == self.fail_on_step:
            raise RuntimeError(f"injected failure at step {batch.step}")
        live = live_items(batch, self.requests)
        if live is not None:
            return expand_result(batch, live, self._run(Batch(batch.step, batch.stage, live)))
        return self._run(batch)

    def _run(self, batch: Batch) -> StepResult:
        if not batch.items:
            return StepResult(batch.step)
        if batch.stage is Stage.PRELUDE:
            self._prelude(batch)
            return StepResult(batch.step)
        if batch.stage is Stage.CODA:
            return CodaResult(batch.step, *self._coda(batch))
        signals = self._run_core(batch)
        if batch.stage is Stage.RECURRENT:
            return RecurrentResult(batch.step, signals)
        return StepResult(batch.step)

    def _bound_block_manager(self) -> BlockManager:
        if self.block_manager is None:
            raise RuntimeError("ModelRunner: no block manager; call bind(core) first")
        return self.block_manager

    def _params(self, item: ScheduledItem) -> SamplingParams:
        """CODA items carry their params; otherwise ask the bound core."""
        if item.params is not None:
            return item.params
        p = self.params_fn(item.request_id, item.generation) if self.params_fn else None
        return p if p is not None else SamplingParams()

    def _lookahead_seed(self, item: ScheduledItem) -> int:
        p = self.params_fn(item.request_id, item.generation) if self.params_fn else None
        exit_cfg = (p.exit if p is not None else None) or self.cfg.exit
        return exit_cfg.seed

    def _decode_slots(self, items: list[ScheduledItem]) -> torch.Tensor:
        """Device indices of the items' one-row decode states."""
        slot = self.decode_states.slot
        return upload_ints([slot(it.key) for it in items], self.device)

    def _prelude(self, batch: Batch) -> None:
        items = list(batch.items)
        hidden = self.model.prelude(upload_ints([it.token_ids[0] for it in items], self.device))
        self.decode_states.hidden.index_copy_(0, self._decode_slots(items), hidden)

    def _coda(self, batch: Batch) -> tuple[tuple[int, ...], Logprobs]:
        items = list(batch.items)
        hidden = self.decode_states.hidden.index_select(0, self._decode_slots(items))
        logits = self.model.coda(hidden)
        params = [self._params(it) for it in items]
        return sample(logits, params, [it.request_id for it in items],
                      [it.position for it in items], self.seed, self.readbacks.host,
                      token_histories(items, params, self.requests))

    # ---- core calls ----------------------------------------------------------------------
    def _prepare_batch(self, pairs: CallPairs, backend_prepare: bool = True) -> PreparedCall:
        t0 = time.perf_counter()
        prep = prepare_call(pairs, self._bound_block_manager(), self.device, self._tables)
        if backend_prepare:
            self.backend.prepare(prep.meta)
        self.last_prepare_s += time.perf_counter() - t0
        return prep

    def _inputs(self, pairs: CallPairs, work: dict[int, torch.Tensor]) -> torch.Tensor:
        """Input hidden rows of a call: carried over, decode state, prompt state or embedded."""
        parts: list[torch.Tensor] = []
        decode = [it for it, _ in pairs if it.kind is ItemKind.DECODE and id(it) not in work]
        if decode:
            parts.append(self.decode_states.hidden.index_select(0, self._decode_slots(decode)))
        for item, _ in pairs[len(decode):]:
            rows = work.get(id(item))
            if rows is None:
                if item.fused_prelude:
                    rows = self.model.prelude(upload_ints(item.token_ids, self.device))
                else:
                    assert item.prompt_state is not None
                    rows = self.prompt_states.read(item.prompt_state, item.num_tokens)
            parts.append(rows)
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _run_core(self, batch: Batch) -> tuple[float, ...] | None:
        work: dict[int, torch.Tensor] = {}
        layers = self.kv_cache.layers
        last: tuple[CallPairs, torch.Tensor] | None = None
        graphs = self.graphs if batch.stage is Stage.RECURRENT else None
        for pairs in batch.core_call_items():
            prep = self._prepare_batch(pairs, graphs is None)
            x = self._inputs(pairs, work)
            y = self.model.recurrent(x, prep.positions, layers, prep.meta, self.backend) \
                if graphs is None else graphs.call(prep, x)
            for (item, depth), (r0, r1) in zip(pairs, prep.row_ranges, strict=True):
                work[id(item)] = y[r0:r1]
                if self.hidden_hook is not None:
                    self.hidden_hook(item, depth, y[r0:r1])
            last = (pairs, y)
        signals = None
        if batch.stage is Stage.RECURRENT and batch.needs_signals and last is not None:
            signals = self._signals(last[0], last[1], batch.num_decode_items)
        self._store(batch, work)
        return signals

    def _signals(self, pairs: CallPairs, y: torch.Tensor,
                 num_decode: int) -> tuple[float, ...]:
        # one method the step and calibration's timing of it both call
        return exit_signals(pairs, y, num_decode, gate=self.model.gate, heads=self._head,
                            lookahead_seed=self._lookahead_seed, readbacks=self.readbacks,
                            device=self.device)

    def _store(self, batch: Batch, work: dict[int, torch.Tensor]) -> None:
        decode = [it for it in batch.items if it.kind is ItemKind.DECODE]
        if decode:
            rows = torch.cat([work[id(it)] for it in decode]) if len(decode) > 1 else work[
                id(decode[0])
            ]
            self.decode_states.hidden.index_copy_(0, self._decode_slots(decode), rows)
        for item in batch.items[len(decode):]:
            rows = work[id(item)]
            if item.depth + item.num_depths < self.num_depths:
                assert item.prompt_state is not None
                self.prompt_states.write(item.prompt_state, rows)
            elif item.is_last_chunk:
                slot = self.decode_states.slot_or_new(item.key)
                self.decode_states.hidden[slot] = rows[-1]

    def lookahead_head(self, exit_cfg: ExitConfig) -> LookaheadHead:
        """The random_lookahead head this runner uses for ``exit_cfg`` (built once per seed)."""
        return self._head(exit_cfg.seed)

