"""A simulated sweep's runs as Ray tasks: ``--workers N`` (a local Ray of N CPUs, started and
shut down around the runs) or ``--ray-address ADDR`` (an existing cluster).

Each task is one planned run (arm x point x repeat). A worker rebuilds the plan from the
scenario once per sweep (cost models hold compiled objects that do not pickle; planning is
deterministic and takes milliseconds), runs, checks and summarises its run like the
sequential loop (``loop.run_checked``) and returns the ``RunResult``; records cross the
process boundary as columns (``loopserve.runs.record_pickling``). The driver gathers the
results in plan order, so everything written from them is byte-identical to a sequential run.
Workers need the same loopserve and see the same files (the cost profile, a trace workload) at
the same paths: on a local Ray they share the driver's working directory and environment.

A local Ray's workers are warmed as part of its start-up (``warm_workers``): each of the N
worker processes imports the run modules before the sweep's first task, which
otherwise pays it inside the sweep.

Ray is an optional extra (``pip install 'loopserve[ray]'``): asking for it without it
installed is a one-line error before any work.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tqdm import tqdm

from loopserve.errors import UserError
from loopserve.plan import Plan, plan_runs
from loopserve.runs import interrupts, record_pickling
from loopserve.runs.loop import run_checked, sim_target
from loopserve.schema.scenario import Scenario
from loopserve.stats.metrics import RunResult
from loopserve.targets.sim import SimTarget

INSTALL_HINT = "pip install 'loopserve[ray]'"
WAIT_S = 0.2  # how often the driver looks for a signal while tasks run
CONNECT_TIMEOUT_S = 5.0
WARM_TIMEOUT_S = 30.0  # a warm-up still short of its workers by then is given up, not fatal


@dataclass(frozen=True)
class RayOptions:
    """Where the tasks run: a local Ray of ``workers`` CPUs, or the cluster at ``address``."""

    workers: int | None = None
    address: str | None = None

    @property
    def flag(self) -> str:
        return "--ray-address" if self.address is not None else "--workers"

    @property
    def where(self) -> str:
        return f"ray {self.address}" if self.address is not None else f"ray x{self.workers}"


def require_ray(flag: str) -> ModuleType:
    """The ``ray`` module, or a UserError naming ``flag`` and how to install it."""
    try:
        with interrupts.importing():
            import ray
    except ImportError:
        raise UserError(flag, f"needs Ray, which is not installed: {INSTALL_HINT} "
                        "(or drop the flag to run the sweep in this process)") from None
    return ray


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A ``host:port`` (or ``ray://host:port``) address must accept a TCP connection: Ray
    itself retries an unreachable one for minutes. "auto" and other forms are left to Ray."""
    m = re.fullmatch(r"(?:ray://)?\[?([^\]/]+?)\]?:(\d+)", address.strip())
    if m is None:
        return
    try:
        socket.create_connection((m.group(1), int(m.group(2))), timeout=timeout_s).close()
    except OSError as err:
        raise UserError("--ray-address", f"cannot reach {address} ({err.strerror or err}); "
                        "give the address of a running Ray head (ray start --head), or "
                        "--workers N for a local Ray") from None


@contextmanager
def ray_session(opts: RayOptions) -> Iterator[ModuleType]:
    """Ray started (or connected) for the block and always shut down after it, error or
    signal included; a Ray this process already started is used as it is and left running.
    The driver's SIGINT/SIGTERM handlers are kept: ``ray.init`` installs its own."""
    ray = require_ray(opts.flag)
    if ray.is_initialized():
        yield ray
        return
    kept = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                              "configure_logging": False}
    if opts.address is not None:
        check_reachable(opts.address)
        kwargs["address"] = opts.address
    else:
        kwargs["num_cpus"] = opts.workers  # local workers inherit env and sys.path
    try:
        ray.init(**kwargs)
    except Exception as err:  # noqa: BLE001 - Ray's start-up timeout is a bare Exception
        for s, h in kept.items():
            signal.signal(s, h)
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(opts.flag, f"could not start Ray ({type(err).__name__}): {first}; "
                        "see /tmp/ray/session_latest/logs") from None
    try:
        for s, h in kept.items():
            signal.signal(s, h)
        if opts.workers is not None:
            # a cluster's workers may sit on other nodes, where the file barrier cannot reach
            # (and a long-lived cluster's workers are warm already): only a local Ray is warmed
            warm_workers(ray, opts.workers)
        yield ray
    finally:
        ray.shutdown()


def _warm_task(barrier: str, n: int, deadline: float) -> int:
    """A warm-up task: its worker has imported this module (and with it the run modules) to
    run it; it holds its CPU until ``n`` warm-up tasks have started, so that each of them runs
    in a worker process of its own. Returns that process's id."""
    record_pickling.register()
    pid = os.getpid()
    open(os.path.join(barrier, str(pid)), "w").close()
    while len(os.listdir(barrier)) < n and time.time() < deadline:
        time.sleep(0.002)
    return pid


def warm_workers(ray: ModuleType, n: int, timeout_s: float = WARM_TIMEOUT_S) -> list[int]:
    """``n`` concurrent warm-up tasks on a local Ray of ``n`` CPUs, so that every worker
    process has imported the run modules before a sweep's tasks arrive; the ids of the
    processes reached (``n`` distinct ones unless ``timeout_s`` ran out first)."""
    task = ray.remote(_warm_task)
    with tempfile.TemporaryDirectory(prefix="loopserve-warm-") as barrier:
        deadline = time.time() + timeout_s
        pending = [task.remote(barrier, n, deadline) for _ in range(n)]
        pids: set[int] = set()
        while pending and time.time() < deadline + 1.0:  # a task returns by its deadline
            interrupts.check()
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=WAIT_S)
            pids.update(ray.get(ready))
        return sorted(pids)


@dataclass(frozen=True)
class _Failed:
    """A run's ValueError, carried back to the driver to become its one-line UserError."""

    message: str


_plans: dict[str, tuple[Plan, SimTarget]] = {}  # per worker process: sweep token -> plan


def run_task(token: str, scenario: Scenario, cwd: str, index: int,
             expect: tuple[str, int, int, int]) -> RunResult | _Failed:
    """Planned run ``index`` of the scenario's simulated plan (the body of a Ray task);
    ``expect`` is the driver's (arm, point_id, repeat, seed) of that run."""
    record_pickling.register()
    if token not in _plans:
        if os.path.isdir(cwd):
            os.chdir(cwd)  # relative paths in the scenario resolve as in the driver
        _plans.clear()
        plan = plan_runs(scenario, "sim")
        _plans[token] = (plan, sim_target(plan))
    plan, target = _plans[token]
    spec = plan.runs[index]
    if (spec.arm, spec.point_id, spec.repeat, spec.seed) != expect:
        raise RuntimeError(f"run {index} planned differently in the worker: "
                           f"{(spec.arm, spec.point_id, spec.repeat, spec.seed)} != {expect}")
    point = plan.point(spec.point_id)
    try:
        return run_checked(plan, target, point, spec)
    except ValueError as err:
        return _Failed(str(err))


def execute_on_ray(plan: Plan, opts: RayOptions, *, progress: bool = True) -> list[RunResult]:
    """Every planned run of a simulated plan as a Ray task, results in plan order."""
    if plan.target != "sim":
        raise UserError(opts.flag, f"target {plan.target} runs one run at a time on its one "
                        "device; drop the flag (Ray runs simulated sweeps only)")
    with ray_session(opts) as ray:
        task = ray.remote(run_task)
        token = uuid.uuid4().hex
        scn_ref = ray.put(plan.scenario)
        refs = [task.remote(token, scn_ref, os.getcwd(), i,
                            (s.arm, s.point_id, s.repeat, s.seed))
                for i, s in enumerate(plan.runs)]
        index = {ref: i for i, ref in enumerate(refs)}
        done: dict[int, RunResult | _Failed] = {}
        pending = list(refs)
        with tqdm(total=len(refs), desc=f"{plan.scenario.name} [sim, {opts.where}]",
                  unit="run", file=sys.stderr, disable=not progress, leave=False) as bar:
            while pending:
                interrupts.check()
                ready, pending = ray.wait(pending, num_returns=len(pending), timeout=WAIT_S)
                for ref in ready:
                    done[index[ref]] = ray.get(ref)
                bar.update(len(ready))
        interrupts.check()
    out = []
    for spec, result in zip(plan.runs, (done[i] for i in range(len(refs))), strict=True):
        if isinstance(result, _Failed):
            raise UserError.from_value_error(
                ValueError(result.message), "workload",
                f"arm {spec.arm}, point {spec.point_id}, repeat {spec.repeat}")
        out.append(result)
    return out
