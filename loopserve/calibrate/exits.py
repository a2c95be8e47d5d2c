"""Measure an exit profile: run the real model over a prompt set with every token going the
full depth (fixed exits) and read the exit gate at every depth of every decode token, through
the runner's hidden-state hook, so any threshold can be replayed later (``sim.exit_profile``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import random
from collections.abc import Sequence
from pathlib import Path

import torch

from engine.core import ExitConfig, SamplingParams
from engine.core.batch import ItemKind, ScheduledItem
from engine.llm import LLM
from engine.model.alloc import default_dtype
from engine.model.build import build_model
from loopserve.calibrate.job import device_name, hardware_name
from loopserve.outputs.env_info import commit_label
from sim.cost.resolve import model_label
from sim.exit_profile import ExitProfile, ExitProvenance, LookaheadScores


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


def measure_exit_profile(
    *, model: str, prompts: Sequence[Sequence[int]], prompt_source: str, max_tokens: int,
    target: str = "cpu", seed: int = 0, lookahead_seed: int = 0, threads: int = 1,
    command: list[str] | None = None,
) -> ExitProfile:
    """Generate ``max_tokens`` per prompt at full depth and record every decode token's gate
    vector; ValueError("model: ...") for an unknown model."""
    device = torch.device(target)
    before = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(threads)
    try:
        dtype = default_dtype(device)
        net = build_model(model, seed=seed, device=device, dtype=dtype)
        llm = LLM(net, arm="atomic", device=device, dtype=dtype, seed=seed,
                  exit=ExitConfig(mode="fixed"), max_num_seqs=8)
        rec = _GateRecorder(llm, lookahead_seed)
        llm.runner.hidden_hook = rec
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        outs = llm.generate(prompts, params)
    finally:
        torch.set_num_threads(before)
    failed = [o.request_id for o in outs if o.finish_reason == "error"]
    if failed:
        raise ValueError(f"model: {len(failed)} of {len(outs)} measurement requests failed "
                         "(prompt token ids outside the vocabulary?)")
    num_depths = net.config.total_ut_steps
    ids = {o.request_id: i for i, o in enumerate(outs)}
    keys = sorted({(r, p) for (r, p, _d) in rec.gate}, key=lambda k: (ids[k[0]], k[1]))
    tokens = [(ids[r], p) for r, p in keys]
    lambdas = [[rec.gate[(r, p, d)] for d in range(num_depths)] for r, p in keys]
    scores = [[rec.score[(r, p, d)] for d in range(num_depths)] for r, p in keys]
    prov = ExitProvenance(
        model=model_label(model), checkpoint_sha256=checkpoint_sha256(model),
        prompt_source=prompt_source, num_prompts=len(prompts), num_tokens=len(tokens),
        seed=seed, device=device_name(device), dtype=str(dtype).removeprefix("torch."),
        torch_version=torch.__version__, commit=commit_label(),
        date=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        max_tokens=max_tokens, command=command,
    )
    return ExitProfile(model=model_label(model), num_depths=num_depths, provenance=prov,
                       tokens=tokens, lambdas=lambdas,
                       lookahead=LookaheadScores(seed=lookahead_seed, scores=scores))
