"""The forced batch shapes calibration measures: a fitting grid plus held-out shapes.

A ``Shape`` says what one step contains, independent of any core or runner: decode rows
(context, depth), prompt items (prefix, chunk, depth, fused prelude), how many depths a
PREFILL item runs, or the row count of a PRELUDE / CODA step. ``shape_grid`` covers what the
three arms produce (decode-only RECURRENT at several row counts, contexts and depth mixes;
prompt-only per-depth items at several chunk sizes and prefixes; mixed calls with and without
a fused prelude; A0 atomic PREFILL steps and prompt shortcuts; PRELUDE; CODA). Held-out shapes
are drawn at off-grid values from the same ranges with a seeded generator and are never fitted.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from engine.core.batch import Batch, ItemKind
from engine.core.results import step_kind


@dataclass(frozen=True, slots=True)
class DecodeRow:
    """One decode item: it attends to ``context`` positions (its own included) at ``depth``."""

    context: int
    depth: int = 0


@dataclass(frozen=True, slots=True)
class PromptChunk:
    """One prompt item over positions [prefix, prefix + chunk) at ``depth``."""

    prefix: int
    chunk: int
    depth: int = 0
    fused: bool = False  # embedded inside this core call (depth 0 only)


@dataclass(frozen=True, slots=True)
class Shape:
    """One forced step. ``num_depths`` applies to PREFILL items (D for A0, fewer for a prompt
    shortcut that starts deeper); ``rows`` to PRELUDE / CODA steps."""

    kind: str
    decode: tuple[DecodeRow, ...] = ()
    prompts: tuple[PromptChunk, ...] = ()
    num_depths: int = 1
    rows: int = 0
    held_out: bool = False

    @property
    def label(self) -> str:
        """Compact, unique-enough description for logs and CSV files."""
        parts = [self.kind]
        if self.decode:
            ctx = sorted(r.context for r in self.decode)
            depths = sorted({r.depth for r in self.decode})
            parts.append(f"d{len(self.decode)}x[{ctx[0]}..{ctx[-1]}]@{depths}")
        for p in self.prompts:
            parts.append(f"p{p.chunk}+{p.prefix}@{p.depth}{'f' if p.fused else ''}")
        if self.kind == "prefill":
            parts.append(f"D{self.num_depths}")
        if self.rows:
            parts.append(f"r{self.rows}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class GridSpec:
    """The ranges the grid covers. Contexts include the row itself; prefixes are the KV
    positions before a prompt chunk. ``num_depths`` is the model's (calibrate sets it)."""

    rows: tuple[int, ...] = (1, 2, 4, 8, 12, 14, 16)
    # dense from 256 to 1024, where 8-16 rows' KV outgrows a CPU's last-level cache
    contexts: tuple[int, ...] = (64, 256, 512, 768, 1024, 1536, 2048)
    chunks: tuple[int, ...] = (16, 64, 128, 256)
    prefixes: tuple[int, ...] = (0, 256, 1024, 2048)
    mixed_rows: tuple[int, ...] = (1, 4, 8, 12, 16)
    num_depths: int = 4
    held_out_per_kind: dict[str, int] = field(
        default_factory=lambda: {"decode": 8, "prompt": 8, "mixed": 10, "prefill": 6,
                                 "prelude": 3, "coda": 3}
    )

    @property
    def max_rows(self) -> int:
        return max(max(self.rows), max(self.mixed_rows))


QUICK = GridSpec(
    rows=(1, 4), contexts=(16, 96), chunks=(8, 32), prefixes=(0, 64), mixed_rows=(2, 4),
    held_out_per_kind={"decode": 2, "prompt": 2, "mixed": 2, "prefill": 2, "prelude": 1,
                       "coda": 1},
)


def _decode_rows(n: int, context: int, spread: bool, num_depths: int) -> tuple[DecodeRow, ...]:
    """``n`` rows at ``context``; spread: contexts ramp up to ``context`` and depths cycle."""
    if not spread:
        return tuple(DecodeRow(context, 0) for _ in range(n))
    return tuple(
        DecodeRow(max(1, context * (i + 1) // n), i % num_depths) for i in range(n)
    )


def fit_shapes(spec: GridSpec) -> list[Shape]:
    """The fitting grid (deterministic)."""
    D = spec.num_depths
    out: list[Shape] = []
    for n in spec.rows:
        for c in spec.contexts:
            for spread in ((False, True) if n > 1 else (False,)):  # one row cannot spread
                out.append(Shape("decode", decode=_decode_rows(n, c, spread, D)))
    # The spread decode shapes (and single rows) again, timed right after a prompt step
    # (measure._predecessor): in A0/A1 every decode call during prompt work follows it.
    out += [_after_prompt(s) for s in out if s.kind == "decode"
            and (len(s.decode) == 1 or len({r.depth for r in s.decode}) > 1)]
    for chunk in spec.chunks:
        for prefix in spec.prefixes:
            out.append(Shape("prompt", prompts=(PromptChunk(prefix, chunk, 0, True),)))
            out.append(Shape("prompt", prompts=(PromptChunk(prefix, chunk, 1 % D, False),)))
    small, big = min(spec.chunks), max(spec.chunks)
    # several prompt items in one call (A1 packs whole items up to the budget; A2 early on)
    mid_chunk = spec.chunks[len(spec.chunks) // 2 - 1] if len(spec.chunks) > 1 else small
    for k in (2, 3, 4):
        for chunk in dict.fromkeys((small, mid_chunk)):
            out.append(Shape("prompt", prompts=tuple(
                PromptChunk(spec.prefixes[i % len(spec.prefixes)], chunk, i % D, i == 0)
                for i in range(k))))
    # Decode contexts rotate through the context grid (offset by the row count), so the mixed
    # fit sees the whole decode range, decorrelated from chunk, prefix and fusion, without
    # multiplying the grid.
    ctx = spec.contexts
    combos = itertools.product(spec.mixed_rows, spec.chunks, (spec.prefixes[0],
                                                             spec.prefixes[-1]), (True, False))
    for i, (n, chunk, prefix, fused) in enumerate(combos):
        prompts = [PromptChunk(prefix, chunk, 0 if fused else D - 1, fused)]
        if i % 3 == 2:  # a second prompt item in every third call
            prompts.append(PromptChunk(spec.prefixes[len(spec.prefixes) // 2], small, 1 % D))
        out.append(Shape(
            "mixed", decode=_decode_rows(n, ctx[(i + n) % len(ctx)], True, D),
            prompts=tuple(prompts),
        ))
    out.append(Shape("mixed", decode=_decode_rows(max(spec.mixed_rows), max(spec.contexts),
                                                  True, D),
                     prompts=(PromptChunk(spec.prefixes[1 % len(spec.prefixes)], big, 2 % D),
                              PromptChunk(0, small, 0, True))))
    for chunk in spec.chunks:
        for prefix in spec.prefixes:
            out.append(Shape("prefill", prompts=(PromptChunk(prefix, chunk, 0, True),),
                             num_depths=D))
        out.append(Shape("prefill", prompts=(PromptChunk(spec.prefixes[0], chunk, 0, True),
                                             PromptChunk(spec.prefixes[-1], chunk, 0, True)),
                         num_depths=D))
    if D > 2:  # prompt shortcut: the remaining depths of an embedded item in one step
        for chunk in (small, big):
            out.append(Shape("prefill", prompts=(PromptChunk(spec.prefixes[1 % len(
                spec.prefixes)], chunk, D // 2, False),), num_depths=D - D // 2))
    for n in range(1, spec.max_rows + 1):  # cheap steps: every row count
        out.append(Shape("prelude", rows=n))
        out.append(Shape("coda", rows=n))
    return out


def held_out_shapes(spec: GridSpec, seed: int = 1) -> list[Shape]:
    """Random shapes inside the grid's ranges, off the grid where the ranges allow."""
    rng = random.Random(seed)
    D = spec.num_depths
    lo_ctx, hi_ctx = min(spec.contexts), max(spec.contexts)
    lo_ch, hi_ch = min(spec.chunks), max(spec.chunks)
    hi_pre = max(spec.prefixes)
    max_rows = spec.max_rows

    def rows() -> tuple[DecodeRow, ...]:
        n = rng.randint(1, max_rows)
        return tuple(DecodeRow(rng.randint(lo_ctx, hi_ctx), rng.randrange(D)) for _ in range(n))

    def chunk(depth: int | None = None, fused: bool | None = None) -> PromptChunk:
        d = rng.randrange(D) if depth is None else depth
        f = (d == 0 and rng.random() < 0.5) if fused is None else fused
        return PromptChunk(rng.randint(0, hi_pre), rng.randint(lo_ch, hi_ch), d, f)

    out: list[Shape] = []
    n = spec.held_out_per_kind
    for _ in range(n.get("decode", 0)):
        out.append(Shape("decode", decode=rows(), held_out=True))
    for _ in range(n.get("prompt", 0)):
        k = 1 if rng.random() < 0.7 else 2
        out.append(Shape("prompt", prompts=tuple(chunk() for _ in range(k)), held_out=True))
    for _ in range(n.get("mixed", 0)):
        out.append(Shape("mixed", decode=rows(), prompts=(chunk(),), held_out=True))
    for _ in range(n.get("prefill", 0)):
        k = 1 if rng.random() < 0.7 else 2
        out.append(Shape("prefill", prompts=tuple(chunk(0, True) for _ in range(k)),
                         num_depths=D, held_out=True))
    for kind in ("prelude", "coda"):
        for _ in range(n.get(kind, 0)):
            out.append(Shape(kind, rows=rng.randint(1, max_rows), held_out=True))
    # The held-out decode shapes again, timed after a prompt step (no further draws).
    return out + [_after_prompt(s) for s in out if s.kind == "decode"]


def _after_prompt(shape: Shape) -> Shape:
    return Shape("decode_after_prompt", decode=shape.decode, held_out=shape.held_out)


def shape_grid(spec: GridSpec, seed: int = 1) -> list[Shape]:
    """Fitting shapes followed by held-out shapes."""
    return fit_shapes(spec) + held_out_shapes(spec, seed)


def shape_of(batch: Batch) -> Shape:
    """The forced shape that reproduces ``batch`` (for re-measuring steps of a real run)."""
    kind = step_kind(batch)
    if kind in ("prelude", "coda"):
        return Shape(kind, rows=len(batch.items))
    decode = tuple(DecodeRow(it.position + 1, it.depth) for it in batch.items
                   if it.kind is ItemKind.DECODE)
    prompts = tuple(PromptChunk(it.position, it.num_tokens, it.depth, it.fused_prelude)
                    for it in batch.items if it.kind is ItemKind.PROMPT)
    depths = max((it.num_depths for it in batch.items), default=1)
    return Shape(kind, decode=decode, prompts=prompts, num_depths=depths)


def probe_shapes(num_depths: int, max_context: int = 1024) -> dict[str, Shape]:
    """Fixed reference steps timed at calibration and again at fidelity time: their ratio
    tells how much faster or slower the machine runs now (shared machines drift, most for
    steps whose working set is large)."""
    return {
        "decode_small": Shape("decode", decode=tuple(DecodeRow(128, i % num_depths)
                                                     for i in range(8))),
        "decode_large": Shape("decode", decode=tuple(DecodeRow(max_context, i % num_depths)
                                                     for i in range(8))),
        "prompt": Shape("prompt", prompts=(PromptChunk(max_context // 4, 64, 1 % num_depths),)),
    }
