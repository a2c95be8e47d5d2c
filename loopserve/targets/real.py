"""Real-engine targets (``--target cpu|cuda``): the scenario on ``engine.realtime.run_realtime``.

Loaded only through ``loopserve.targets.load`` (torch is imported here). The model is built
once per target (preset with seeded weights from the scenario seed, or a checkpoint
directory) and shared by every run; each run gets a fresh ModelRunner sized by its
EngineConfig.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.core.config import EngineConfig
from engine.core.records import ArrivalSource, RunRecords
from engine.host_allocator import steady_allocator
from engine.llm import build_runner
from engine.model.alloc import default_dtype
from engine.model.build import build_model
from engine.realtime import run_realtime
from engine.runner import ModelRunner
from loopserve.errors import UserError
from loopserve.schema.scenario import Scenario
from loopserve.targets import RunSpec


def check_device(target: str, flag: str = "--target") -> None:
    """Raise a UserError naming ``flag`` when ``target`` is cuda and this machine has no
    CUDA device."""
    if target == "cuda" and not torch.cuda.is_available():
        fix = "use cpu or sim" if flag == "--target" else "use --device cpu"
        raise UserError(flag, f"cuda: no CUDA device on this machine; {fix}")


def device_free(target: str) -> int | None:
    """Free bytes on the cuda device now; None for cpu."""
    if target != "cuda" or not torch.cuda.is_available():
        return None
    return int(torch.cuda.mem_get_info()[0])


class RealTarget:
    """Builds the model once and runs each planned run on wall-clock time."""

    def __init__(self, scn: Scenario, target: str) -> None:
        self.device = target
        r = scn.runner
        self.dtype = getattr(torch, r.dtype) if r.dtype else default_dtype(target)
        self.attention_backend = r.attention_backend
        self.cuda_graphs = r.cuda_graphs
        if target != "cuda" and r.cuda_graphs != "off":
            raise UserError("runner.cuda_graphs", f"{r.cuda_graphs!r} needs --target cuda, not "
                            f"{target}; set cuda_graphs: off")
        self.backend_used: str | None = None  # what the runners ran (auto resolved)
        if target == "cpu":
            # Same allocator as `loopserve calibrate`, so measured steps match the profile.
            steady_allocator()
            if r.num_threads is not None:
                torch.set_num_threads(r.num_threads)
        try:
            self.model = build_model(scn.model, seed=scn.seed, device=target, dtype=self.dtype)
        except (ValueError, OSError, KeyError) as err:
            raise UserError.from_value_error(ValueError(str(err)), "model") from None

    def runner(self, cfg: EngineConfig, seed: int) -> ModelRunner:
        """A fresh ModelRunner for one run; UserError naming the runner field if it cannot
        be built (an unavailable attention backend, say)."""
        try:
            runner = build_runner(self.model, cfg, self.device, self.dtype, seed,
                                  self.attention_backend, cuda_graphs=self.cuda_graphs)
        except ValueError as err:
            raise UserError.from_value_error(err, "runner") from None
        self.backend_used = runner.backend.name
        return runner

    def info(self) -> dict[str, Any]:
        """What env.json records of the real engine: the backend that ran, the dtype."""
        return {"attention_backend": self.backend_used, "requested": self.attention_backend,
                "cuda_graphs": self.cuda_graphs,
                "dtype": str(self.dtype).removeprefix("torch.")}

    def run(self, spec: RunSpec, source: ArrivalSource) -> RunRecords:
        return run_realtime(spec.cfg, source, self.runner(spec.cfg, spec.seed))
