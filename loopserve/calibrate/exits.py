"""Measure an exit profile: run the real model over a prompt set with every token going the
full depth (fixed exits) and read the exit gate at every depth of every decode token, through
the runner's hidden-state hook, so any threshold can be replayed later (``sim.exit_profile``);
then, per requested policy, the same prompts with the exits on, recording each token's signal
at the depths it ran (``sim.exit_regime``: what that policy's replay draws).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.core import ExitConfig, SamplingParams
from engine.core.batch import ItemKind, ScheduledItem
from engine.llm import LLM, RequestOutput
from engine.model.alloc import default_dtype
from engine.model.build import build_model
from engine.model.ouro import OuroForCausalLM
from loopserve.calibrate.job import device_name, hardware_name
from loopserve.outputs.env_info import commit_label
from sim.cost.resolve import model_label
from sim.exit_profile import ExitProfile, ExitProvenance, LookaheadScores, exit_depth
from sim.exit_regime import regime_of


def generated_prompts(num: int, vocab_size: int, seed: int, low: int = 16,
                      high: int = 128) -> list[list[int]]:
    """Random-token prompts of lognormal-ish lengths in [low, high] (random-weight presets)."""
    rng = random.Random(seed)
    out = []
    for _ in range(num):
        n = min(high, max(low, int(rng.lognormvariate(3.8, 0.5))))
        out.append([rng.randrange(1, vocab_size) for _ in range(n)])
    return out


def hardware_of(target: str) -> str:
    """The hardware name a profile of ``target`` (cpu | cuda) is filed under."""
    return hardware_name(torch.device(target))


def checkpoint_sha256(model: str) -> str | None:
    """SHA-256 of a checkpoint folder's weight files (None for a preset's seeded weights)."""
    folder = Path(model)
    if not folder.is_dir():
        return None
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


class _GateRecorder:
    """hidden_hook: the gate (and lookahead score) of every decode row at every depth."""

    def __init__(self, llm: LLM, lookahead_seed: int) -> None:
        self.llm = llm
        self.head = llm.runner.lookahead_head(ExitConfig(mode="random_lookahead",
                                                         exit_threshold=0.5, seed=lookahead_seed))
        self.gate: dict[tuple[str, int, int], float] = {}
        self.score: dict[tuple[str, int, int], float] = {}

    @torch.no_grad()
    def __call__(self, item: ScheduledItem, depth: int, rows: torch.Tensor) -> None:
        if item.kind is not ItemKind.DECODE:
            return
        key = (item.request_id, item.position, depth)
        self.gate[key] = float(self.llm.runner.model.gate(rows[-1:])[0])
        self.score[key] = float(self.head(rows[-1:]).reshape(-1)[0])


@dataclass
class _Measured:
    """One pass over the prompts: per (prompt index, position, depth) gate and score, and
    each prompt's output."""

    gate: dict[tuple[int, int, int], float]
    score: dict[tuple[int, int, int], float]
    outs: list[RequestOutput]


def _rows(m: _Measured, num_depths: int, head: str
          ) -> tuple[list[tuple[int, int]], list[list[float | None]]]:
    """Each decode token's (prompt index, position) and its ``head`` values at the depths it
    ran (None after), in prompt then position order."""
    values = m.gate if head == "gate" else m.score
    keys = sorted({(i, p) for (i, p, _d) in values})
    return keys, [[values.get((i, p, d)) for d in range(num_depths)] for i, p in keys]


def _generate(net: OuroForCausalLM, prompts: Sequence[Sequence[int]],
              params: list[SamplingParams], groups: dict[int, list[int]], *,
              device: torch.device, dtype: torch.dtype, lookahead_seed: int,
              exit: ExitConfig, layout: str) -> _Measured:
    """Every prompt once, each group (runner seed -> prompt indices) on its own engine seeded
    as a run of that seed is, so sampling draws what the run draws."""
    m = _Measured({}, {}, [])
    outs: dict[int, RequestOutput] = {}
    for seed, idx in groups.items():
        llm = LLM(net, arm="atomic", device=device, dtype=dtype, seed=seed, exit=exit,
                  max_num_seqs=8, layout=layout)
        rec = _GateRecorder(llm, lookahead_seed)
        llm.runner.hidden_hook = rec
        got = llm.generate([prompts[i] for i in idx], [params[i] for i in idx])
        where = {o.request_id: i for i, o in zip(idx, got, strict=True)}
        for (rid, pos, d), v in rec.gate.items():
            m.gate[where[rid], pos, d] = v
            m.score[where[rid], pos, d] = rec.score[rid, pos, d]
        outs.update(zip(idx, got, strict=True))
    m.outs = [outs[i] for i in range(len(prompts))]
    failed = [o.request_id for o in m.outs if o.finish_reason == "error"]
    if failed:
        raise ValueError(f"model: {len(failed)} of {len(m.outs)} measurement requests failed "
                         "(prompt token ids outside the vocabulary?)")
    return m


def _check_regime(outs: Sequence[RequestOutput], tokens: list[tuple[int, int]],
                  rows: list[list[float | None]], cfg: ExitConfig, num_depths: int) -> None:
    """Every row ran the depths its token exited at, and the core's decider, replaying the
    row, exits there too (so a simulation of this policy takes the measured exits)."""
    bad = 0
    for (i, pos), row in zip(tokens, rows, strict=True):
        out = outs[i]
        taken = out.exit_depths[pos - len(out.prompt_token_ids) + 1]
        ran = sum(v is not None for v in row)
        if ran != taken or exit_depth(row, cfg, num_depths) != taken:
            bad += 1
    if bad:
        raise RuntimeError(f"exit regime {cfg.mode}@{cfg.exit_threshold:g}: {bad} of "
                           f"{len(rows)} tokens ran other depths than their gates imply")


def measure_exit_profile(
    *, model: str, prompts: Sequence[Sequence[int]], prompt_source: str,
    max_tokens: int | Sequence[int], target: str = "cpu", seed: int = 0,
    lookahead_seed: int = 0, threads: int = 1, command: list[str] | None = None,
    regimes: Sequence[ExitConfig] = (), layout: str = "last_exited",
    sources: Sequence[tuple[int, str]] | None = None,
) -> ExitProfile:
    """Generate ``max_tokens`` (one count, or one per prompt) per prompt at full depth and
    record every decode token's gate vector; then once more per policy of ``regimes`` with
    the exits on (``sim.exit_regime``; ``sources``: each prompt's workload seed and request
    id, recorded so a simulation replays those tokens' own rows; each seed's prompts run on an
    engine of that seed, as that run's do). Weights come from ``seed``, as a real target
    builds them from the scenario seed. ValueError("model: ...") for an unknown model."""
    device = torch.device(target)
    counts = [max_tokens] * len(prompts) if isinstance(max_tokens, int) else list(max_tokens)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in counts]
    before = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(threads)
    try:
        dtype = default_dtype(device)
        net = build_model(model, seed=seed, device=device, dtype=dtype)
        num_depths = net.config.total_ut_steps
        groups: dict[int, list[int]] = {}
        for i in range(len(prompts)):
            groups.setdefault(seed if sources is None else sources[i][0], []).append(i)

        def run(exit: ExitConfig) -> _Measured:
            return _generate(net, prompts, params, groups, device=device, dtype=dtype,
                             lookahead_seed=lookahead_seed, exit=exit, layout=layout)

        full = run(ExitConfig(mode="fixed"))
        tokens, lambdas = _rows(full, num_depths, "gate")
        _, scores = _rows(full, num_depths, "score")
        measured = []
        for cfg in regimes:
            got = run(cfg)
            head = "score" if cfg.mode == "random_lookahead" else "gate"
            r_tokens, r_rows = _rows(got, num_depths, head)
            _check_regime(got.outs, r_tokens, r_rows, cfg, num_depths)
            measured.append(regime_of(cfg, num_depths, layout, r_tokens, r_rows,
                                      sources=list(sources) if sources is not None else None))
    finally:
        torch.set_num_threads(before)
    prov = ExitProvenance(
        model=model_label(model), checkpoint_sha256=checkpoint_sha256(model),
        prompt_source=prompt_source, num_prompts=len(prompts), num_tokens=len(tokens),
        seed=seed, device=device_name(device), dtype=str(dtype).removeprefix("torch."),
        torch_version=torch.__version__, commit=commit_label(),
        date=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        max_tokens=max(counts), command=command,
    )
    return ExitProfile(model=model_label(model), num_depths=num_depths, provenance=prov,
                       tokens=tokens, lambdas=[[float(v) for v in r if v is not None]
                                               for r in lambdas],
                       lookahead=LookaheadScores(seed=lookahead_seed, scores=[
                           [float(v) for v in r if v is not None] for r in scores]),
                       regimes=measured or None)


# what ``loopserve calibrate`` measures beside the cost profile (``exit-profile``'s defaults;
# ``--quick`` fewer): prompts, output tokens each, and the exit policies of the regimes
CALIBRATE_PROMPTS = (96, 16)
CALIBRATE_TOKENS = (48, 16)
CALIBRATE_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)


def calibration_exit_profile(*, model: str, target: str, seed: int, threads: int, quick: bool,
                             command: list[str] | None = None) -> ExitProfile:
    """The exit profile ``loopserve calibrate`` writes as ``<stem>.exits.json`` beside the
    cost profile, so a simulation of adaptive exits after calibrating draws measured gates
    (``loopserve exit-profile`` stays for a scenario's own prompts and policy)."""
    from loopserve.schema.build import model_shape

    num = CALIBRATE_PROMPTS[quick]
    prompts = generated_prompts(num, model_shape(model).vocab_size, seed)
    regimes = [ExitConfig(mode="ouro", exit_threshold=t, seed=0) for t in CALIBRATE_THRESHOLDS]
    return measure_exit_profile(
        model=model, prompts=prompts, max_tokens=CALIBRATE_TOKENS[quick], target=target,
        seed=seed, threads=threads, command=command, regimes=regimes,
        prompt_source=f"generated: {num} random-token prompts of 16-128 tokens, seed {seed} "
                      "(loopserve calibrate)")

