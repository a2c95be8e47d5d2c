"""Time the real ``ModelRunner`` on forced batch shapes (torch; imported only to calibrate).

``CalibrationRig`` turns a ``Shape`` into a ``Batch`` with valid block tables from a real
``EngineCore``'s BlockManager (synthetic requests whose KV history is marked written, decode
and prompt hidden states present in the runner's pools), so ``runner.execute(batch)`` runs
exactly as in serving and can be repeated. Only ``execute`` is timed: CUDA events around it
then a synchronize on CUDA, ``perf_counter`` on CPU (samples the OS interrupted are dropped).
Shapes are measured in rounds, each in a fresh seeded order (noise spreads over many
shapes), each visit warmed up first; the median per shape is kept. ``probe_shapes`` are
fixed reference steps whose stored times show later how far the machine has drifted.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from engine.core.batch import Batch, ItemKind, ScheduledItem
from engine.core.config import CacheConfig, EngineConfig, ModelShape, SchedulerConfig
from engine.core.engine_core import EngineCore
from engine.core.request import PromptStateHandle, Request, SamplingParams, Stage
from engine.runner import ModelRunner
from sim.cost.fit import contended
from sim.cost.shape_grid import DecodeRow, PromptChunk, Shape, probe_shapes

# Untimed runs before a timed one: at most this many, none more after this long in all.
WARMUP_RUNS = 4
WARMUP_S = 0.005
_STAGES = {"prelude": Stage.PRELUDE, "coda": Stage.CODA, "prefill": Stage.PREFILL}


# The prompt step a ``decode_after_prompt`` shape is timed after: a typical per-depth chunk.
AFTER_PROMPT_PREFIX, AFTER_PROMPT_CHUNK = 256, 64


def _predecessor(shape: Shape, num_depths: int) -> Shape | None:
    """The untimed step run before a timed one, as in serving: a core call is preceded by a
    like core call (itself), CODA by the last depth of its rows' decode, PRELUDE by CODA, a
    ``decode_after_prompt`` call by a prompt step."""
    if shape.kind == "decode_after_prompt":
        return Shape("prompt", prompts=(PromptChunk(AFTER_PROMPT_PREFIX, AFTER_PROMPT_CHUNK,
                                                    1 % num_depths),))
    if shape.kind == "coda":
        return Shape("decode", decode=tuple(DecodeRow(256, num_depths - 1)
                                            for _ in range(shape.rows)))
    if shape.kind == "prelude":
        return Shape("coda", rows=shape.rows)
    return None


class StepTimer:
    """Times one call: CUDA events + synchronize on a GPU, perf_counter on CPU.

    Returns ``(seconds, clean)``. On CPU ``clean`` is False for a ``contended`` sample (such
    samples measure the neighbours, not the runner); with one torch thread all of ``execute``
    runs on the calling thread. CUDA samples are always clean.
    """


    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.check = not self.cuda and torch.get_num_threads() == 1

    def __call__(self, fn: Callable[[], object]) -> tuple[float, bool]:
        if self.cuda:
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3, True
        c0 = time.thread_time()
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
        cpu = time.thread_time() - c0
        return wall, not self.check or not contended(wall, cpu)


def _blocks(tokens: int, block_size: int) -> int:
    return math.ceil(tokens / block_size)


def config_for(model_shape: ModelShape, shapes: list[Shape], block_size: int = 16) -> EngineConfig:
    """An EngineConfig whose pools and KV cache fit the largest of ``shapes``."""
    D = model_shape.num_depths
    need_blocks, seqs, chunk = 1, 1, 1
    everything = [*shapes, *(p for s in shapes if (p := _predecessor(s, D)) is not None)]
    for s in everything:
        per_plane = sum(_blocks(r.context, block_size) for r in s.decode)
        per_plane += sum(_blocks(p.prefix + p.chunk, block_size) for p in s.prompts)
        per_plane += s.rows * _blocks(1, block_size)
        need_blocks = max(need_blocks, per_plane * D)
        seqs = max(seqs, len(s.decode) + len(s.prompts) + s.rows)
        chunk = max([chunk, *(p.chunk for p in s.prompts)])
    return EngineConfig(
        model=model_shape,
        scheduler=SchedulerConfig(arm="atomic", max_num_seqs=seqs, prefill_chunk_size=chunk,
                                  max_num_batched_tokens=max(chunk, seqs)),
        cache=CacheConfig(num_blocks=need_blocks, block_size=block_size),
    )


@dataclass
class _Live:
    keys: list[tuple[str, int]]
    handles: list[PromptStateHandle]


class CalibrationRig:
    """Builds forced batches on a real core's BlockManager for one runner."""

    def __init__(self, runner: ModelRunner, cfg: EngineConfig, seed: int = 0) -> None:
        self.core = EngineCore(cfg)
        self.runner = runner
        runner.bind(self.core)
        self.kv = self.core.block_manager
        self.num_depths = cfg.model.num_depths
        self.vocab = cfg.model.vocab_size
        self.hidden = cfg.model.hidden_size
        self._ids = itertools.count()
        self._rng = random.Random(seed)
        self._step = itertools.count()

    def _request(self, tokens: int, written: int) -> tuple[str, int]:
        """A synthetic request holding ``tokens`` positions, history written up to
        ``written`` on every plane."""
        key = (f"cal-{next(self._ids)}", 0)
        if not self.kv.allocate(key, max(tokens, 1), max(tokens, 1)):
            raise RuntimeError(f"calibration rig: KV too small for {tokens} positions")
        # Known to the bound core, or the runner drops the item as aborted (live_items) and
        # times an empty batch.
        self.core.requests[key[0]] = Request(key[0], (), SamplingParams(), 0.0)
        if written:
            for d in range(self.num_depths):
                self.kv.mark_written(key, d, 0, written)
        return key

    def build(self, shape: Shape) -> tuple[Batch, _Live]:
        """The batch for ``shape`` plus what to free afterwards (``release``)."""
        live = _Live([], [])
        items: list[ScheduledItem] = []
        pools = self.runner
        if shape.kind in ("prelude", "coda"):
            for i in range(shape.rows):
                key = self._request(16, 15)
                live.keys.append(key)
                pools.decode_states.slot_or_new(key)
                tok = self._rng.randrange(self.vocab)
                items.append(ScheduledItem(
                    key[0], 0, ItemKind.DECODE, 15, 1, depth=0, num_depths=0,
                    token_ids=(tok,) if shape.kind == "prelude" else (),
                    params=SamplingParams() if shape.kind == "coda" else None, output_index=i,
                ))
            return Batch(next(self._step), _STAGES[shape.kind], tuple(items)), live
        for row in shape.decode:
            key = self._request(row.context, row.context - 1)
            live.keys.append(key)
            pools.decode_states.slot_or_new(key)
            items.append(ScheduledItem(key[0], 0, ItemKind.DECODE, row.context - 1, 1,
                                       depth=row.depth, num_depths=1))
        prefill = shape.kind == "prefill"
        for p in shape.prompts:
            key = self._request(p.prefix + p.chunk, p.prefix)
            live.keys.append(key)
            fused = p.fused and p.depth == 0
            depths = shape.num_depths if prefill else 1
            handle = None
            if p.depth + depths < self.num_depths or not fused:
                handle = PromptStateHandle(next(self._ids), key[0], 0)
                live.handles.append(handle)
                if not fused:  # the state an earlier depth left behind
                    pools.prompt_states.write(handle, torch.zeros(
                        p.chunk, self.hidden, device=pools.device, dtype=pools.dtype))
            ids = tuple(self._rng.randrange(self.vocab) for _ in range(p.chunk)) if fused else ()
            items.append(ScheduledItem(
                key[0], 0, ItemKind.PROMPT, p.prefix, p.chunk, depth=p.depth,
                num_depths=depths, fused_prelude=fused,
                token_ids=ids, prompt_state=handle, is_last_chunk=True,
            ))
        stage = Stage.PREFILL if prefill else Stage.RECURRENT
        return Batch(next(self._step), stage, tuple(items)), live

    def release(self, live: _Live) -> None:
        for key in live.keys:
            self.kv.free(key)
            self.core.requests.pop(key[0], None)
            self.runner.decode_states.release(key)
        for handle in live.handles:
            self.runner.prompt_states.release(handle)


@dataclass
class Measured:
    """One shape's clean timings (seconds, warm-up excluded), how many samples were dropped
    as contended, and its batch for feature extraction."""

    shape: Shape
    batch: Batch
    times_s: list[float]
    contended: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s or self.contended)


def measure_shapes(
    rig: CalibrationRig,
    shapes: list[Shape],
    *,
    repeats: int,
    max_seconds: float | None = None,
    seed: int = 0,
    progress: bool = True,
) -> list[Measured]:
    """Rounds over ``shapes`` until each has ``repeats`` clean samples.

    Each visit runs the shape untimed a few times (after its predecessor: CODA after its
    rows' last-depth decode, PRELUDE after their CODA), then times it: serving's steps are
    warm, and a single warm-up after an unrelated shape leaves small steps cold (the warm-up
    row of docs/fidelity.md's "Measured"). Requests are freed after each
    visit. Each round visits the shapes short of samples in a new seeded order, and rounds
    stop at ``2 x repeats`` or before exceeding ``max_seconds`` (one round always runs);
    a shape with no clean sample falls back to its contended ones.
    """
    timer = StepTimer(rig.runner.device)
    out: list[Measured] = []
    for s in shapes:  # one build per shape for its features; freed at once
        batch, live = rig.build(s)
        rig.release(live)
        out.append(Measured(s, batch, []))
    rng = random.Random(seed)
    started = time.perf_counter()
    bar = tqdm(total=len(shapes) * repeats, desc="calibrate", unit="step", file=sys.stderr,
               disable=not progress, leave=False)
    try:
        for _ in range(2 * repeats):
            todo = [i for i, m in enumerate(out) if len(m.times_s) < repeats]
            if not todo:
                break
            rng.shuffle(todo)
            t_round = time.perf_counter()
            for i in todo:
                before = _predecessor(shapes[i], rig.num_depths)
                if before is not None:  # the pools hold one of the two at a time
                    warm_up(functools.partial(_visit, rig, before, shapes[i]))
                    _visit(rig, before)
                batch, live = rig.build(shapes[i])
                try:
                    if before is None:
                        warm_up(functools.partial(rig.runner.execute, batch))
                    dt, clean = timer(lambda b=batch: rig.runner.execute(b))
                finally:
                    rig.release(live)
                (out[i].times_s if clean else out[i].contended).append(dt)
                if clean:
                    bar.update(1)
            if max_seconds is not None:
                per_round = time.perf_counter() - t_round
                if time.perf_counter() - started + per_round > max_seconds:
                    break
    finally:
        bar.close()
    return out


def _visit(rig: CalibrationRig, *shapes: Shape) -> None:
    for shape in shapes:
        batch, live = rig.build(shape)
        rig.runner.execute(batch)
        rig.release(live)


def warm_up(run: Callable[[], object]) -> None:
    """``run()`` untimed, at least once, at most WARMUP_RUNS times or WARMUP_S in all."""
    started = time.perf_counter()
    for _ in range(WARMUP_RUNS):
        run()
        if time.perf_counter() - started >= WARMUP_S:
            break


def time_probes(rig: CalibrationRig, repeats: int = 9) -> dict[str, float]:
    """Median warm execute time of each probe shape (the rig must fit them)."""
    return {name: measure_shapes(rig, [shape], repeats=repeats, progress=False)[0].median_s
            for name, shape in probe_shapes(rig.num_depths).items()}
