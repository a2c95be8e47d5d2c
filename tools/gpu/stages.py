"""The stages of a gpu-check, in order (see ``tools.gpu``), and the function that runs each.
Every stage takes the running ``Check`` and its time cap in seconds and returns a one-line
detail, or raises StageFailed (reported, the next stage still runs) or NotAvailable (the
piece has not landed: n/a).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tools.gpu.context import Check
from tools.gpu.device_stages import ceilings, core, divergence, kernel, pytest
from tools.gpu.footprint_stage import DRY_RUN_REASON as CUDA_ALLOCATOR
from tools.gpu.footprint_stage import footprint
from tools.gpu.graph_stages import DRY_RUN_REASON as GPU_PATH
from tools.gpu.graph_stages import fa4, graph_runs, graph_tokens, graphs
from tools.gpu.profile_stage import profile
from tools.gpu.project_stages import calibrate, fidelity, runs
from tools.gpu.setup_stages import env, install_wheels


@dataclass(frozen=True)
class StageSpec:
    """A stage: its cap in seconds on CUDA and on CPU, and the time it keeps in reserve.
    A stage that is not ``default`` runs only when ``--only`` names it; one with
    ``cuda_only`` (the reason) is skipped in the dry run."""

    name: str
    cap_cuda: float
    cap_cpu: float
    reserve: float
    default: bool = True
    cuda_only: str | None = None

    def selected(self, only: set[str] | None) -> bool:
        return self.default if only is None else self.name in only


STAGES = (
    StageSpec("wheels", 60, 60, 5),
    StageSpec("env", 45, 45, 5),
    StageSpec("ceilings", 60, 45, 10),
    StageSpec("kernel", 100, 60, 15),
    StageSpec("pytest", 120, 90, 20),
    StageSpec("core", 90, 60, 20),
    # The GPU path (CUDA graphs, flash_attn_4): skipped at once in the dry run, so they keep
    # no reserve (the dry run's budget is the other stages'); on a GPU they take what the
    # earlier stages leave, or a call of their own (docs/gpu.md).
    StageSpec("fa4", 90, 10, 0, cuda_only=GPU_PATH),
    StageSpec("graphs", 150, 10, 0, cuda_only=GPU_PATH),
    StageSpec("graph_tokens", 120, 10, 0, cuda_only=GPU_PATH),
    StageSpec("runs", 240, 120, 60),
    StageSpec("graph_runs", 150, 10, 0, cuda_only=GPU_PATH),
    StageSpec("profile", 150, 60, 15),
    StageSpec("footprint", 120, 10, 0, cuda_only=CUDA_ALLOCATOR),
    StageSpec("divergence", 120, 45, 20),
    StageSpec("calibrate", 160, 80, 20),
    # Needs the calibrate stage's profile, and its own budget on a GPU: a second call,
    # `--only calibrate,fidelity --budget-s 400` (docs/gpu.md).
    StageSpec("fidelity", 240, 60, 20, default=False),
)

RUNNERS: dict[str, Callable[[Check, float], str]] = {
    "wheels": install_wheels, "env": env, "ceilings": ceilings, "kernel": kernel,
    "pytest": pytest, "core": core, "runs": runs, "divergence": divergence,
    "calibrate": calibrate, "fidelity": fidelity, "fa4": fa4, "graphs": graphs,
    "graph_tokens": graph_tokens, "graph_runs": graph_runs,
    "profile": profile, "footprint": footprint,
}
