"""Where a round's probes run: one after another in this process, or as Ray tasks
(``--workers N`` / ``--ray-address ADDR``, through ``runs.ray_runs.ray_session``). Either way
every finished probe goes to the store at once (an interrupt loses only the probes still
running) and the round's results come back in the order asked."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm import tqdm

from loopserve.runs import interrupts
from loopserve.runs.capacity_probe import Criterion
from loopserve.runs.ray_runs import WAIT_S, RayOptions, ray_session
from loopserve.tune.probe import ProbeResult, probe_task, run_probe
from loopserve.tune.search import RunRound
from loopserve.tune.space import Config
from loopserve.tune.store import ProbeStore


@contextmanager
def round_runner(crit: Criterion, store: ProbeStore, ray: RayOptions | None, *,
                 progress: bool) -> Iterator[RunRound]:
    """A ``run_round`` for ``search.search``, Ray started for the block when asked."""
    bar = tqdm(desc="tune", unit="probe", file=sys.stderr, disable=not progress, leave=False)
    try:
        if ray is None:
            def sequential(todo: list[tuple[Config, float]]) -> list[ProbeResult]:
                out = []
                for config, rate in todo:
                    interrupts.check()
                    assert config.scenario is not None
                    out.append(run_probe(config.scenario, rate, crit))
                    store.add(config, out[-1])
                    bar.update()
                interrupts.check()
                return out

            yield sequential
            return
        with ray_session(ray) as session:
            task = session.remote(probe_task)
            cwd = os.getcwd()

            def on_ray(todo: list[tuple[Config, float]]) -> list[ProbeResult]:
                refs = [task.remote(c.scenario, rate, crit, cwd) for c, rate in todo]
                where = {ref: i for i, ref in enumerate(refs)}
                done: dict[int, ProbeResult] = {}
                pending = list(refs)
                while pending:
                    interrupts.check()
                    ready, pending = session.wait(pending, num_returns=len(pending),
                                                  timeout=WAIT_S)
                    for ref in ready:
                        i = where[ref]
                        done[i] = session.get(ref)
                        store.add(todo[i][0], done[i])
                        bar.update()
                interrupts.check()
                return [done[i] for i in range(len(refs))]

            yield on_ray
    finally:
        bar.close()
