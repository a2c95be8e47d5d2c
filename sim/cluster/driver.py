"""The SimPy driver of a cluster: N engines, one router, one environment (docs/cluster.md).

Every replica is its own ``EngineCore`` (own block pool, own scheduler) stepped by its own
SimPy process exactly as ``sim.driver`` steps one engine, one timeout per step, so the
replicas' clocks stay together and the router sees each replica as it stands when a request
arrives. With one replica the rows are those of ``sim.driver.simulate`` to the bit.

Disaggregated (P prefill + Q decode replicas): a request is routed to a prefill replica,
which runs it with ``max_tokens`` 1 through every depth in one atomic step (RFC §5: the PD
prefill worker takes PREFILL directly) and samples its first token. The request is then
routed to a decode replica, which reserves a slot and its KV blocks (back-pressure: the
handoff waits, FIFO, until both are free; nothing is dropped); the KV of every depth plane
then crosses the link (``KvTransferConfig``: a SimPy resource, one transfer per link at a
time) and the decode replica takes the request at PRELUDE with its first token. The first
token reaches the client when its KV lands (TTFT = queueing + prefill + transfer).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Generator
from typing import Any

import simpy

from engine.core.arrivals import due_s, timed_arrivals
from engine.core.config import EngineConfig
from engine.core.records import ArrivalSource, ArrivalSpec, RunRecords
from engine.core.results import TokenEvent
from engine.core.run_loop import stall_message
from engine.core.seeded_executor import SeededExecutor, SignalFn
from sim.cluster.config import ClusterConfig, kv_bytes
from sim.cluster.records import RequestInfo, merge
from sim.cluster.replica import Handoff, Replica
from sim.cluster.router import Router
from sim.cost.base import CostModel
from sim.errors import SimulationDeadlock
from sim.step_clock import run_without_gc


class ClusterRun:
    """One cluster run (``simulate_cluster``); ``replicas`` keep their cores after ``run``."""

    def __init__(self, cfg: EngineConfig, cluster: ClusterConfig, source: ArrivalSource,
                 cost: CostModel, executor: SeededExecutor, seed: int,
                 record_batches: bool) -> None:
        self.env = simpy.Environment(initial_time=0.0)
        self.cluster = cluster
        self.source = source
        self.cost = cost
        self.executor = executor
        self.record_batches = record_batches
        self.cfg = cfg
        # RFC §5: a prefill replica takes PREFILL directly; its arm is irrelevant.
        prefill_cfg = dataclasses.replace(
            cfg, scheduler=dataclasses.replace(cfg.scheduler, arm="atomic"))
        self.replicas = [
            Replica(self, i, prefill_cfg if cluster.role(i) == "prefill" else cfg,
                     cluster.role(i))
            for i in range(cluster.num_replicas)
        ]
        p = cluster.num_prefill_replicas
        self.entry = self.replicas[:p] if p else self.replicas
        self.decode = self.replicas[p:] if p else []
        bs, ab = cfg.cache.block_size, cluster.affinity_blocks
        self.router = Router(cluster.router, seed, bs, ab)
        self.decode_router = Router(cluster.router, seed + 1, bs, ab)
        self.link = simpy.Resource(self.env, capacity=cluster.kv_transfer.links)
        self.num_planes = cfg.cache.num_planes(cfg.model.num_depths)
        self.specs: dict[str, ArrivalSpec] = {}
        self.info: dict[str, RequestInfo] = {}
        self.timed = timed_arrivals(source)
        self.next_arrival = 0
        self.next_due_s = due_s(self.timed, 0)  # a field: every replica reads it every step

    # ---- arrivals and routing ------------------------------------------------------------
    def route_due(self, now_s: float) -> None:
        timed = self.timed
        while self.next_arrival < len(timed):
            spec = timed[self.next_arrival]
            due = spec.arrival_s
            assert due is not None
            if due > now_s:
                break
            self.next_arrival += 1
            self.next_due_s = due_s(self.timed, self.next_arrival)
            self.route(spec, due)

    def route(self, spec: ArrivalSpec, arrival_s: float) -> None:
        """Send one arriving request to the replica the router picks, and wake it."""
        replica = self.entry[self.router.pick(self.entry, spec.prompt_token_ids)]
        self.specs[spec.request_id] = spec
        self.info[spec.request_id] = RequestInfo(
            arrival_s, replica.index, replica.index if self.decode else -1)
        if self.decode and spec.params.max_tokens > 1:
            spec = dataclasses.replace(
                spec, params=dataclasses.replace(spec.params, max_tokens=1))
        replica.outstanding += 1
        replica.feeder.submit(spec, arrival_s)
        replica.wake()

    def arrival_process(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        while self.next_arrival < len(self.timed):
            due = self.next_due_s
            if due > env.now:
                yield env.timeout(due - env.now)
            self.route_due(max(due, env.now))  # by the arrival's own time (sim.driver)

    # ---- finishes and handoffs -----------------------------------------------------------
    def finished(self, replica: Replica, event: TokenEvent) -> None:
        replica.outstanding -= 1
        rid = event.request_id
        spec = self.specs[rid]
        if (replica.role == "prefill" and event.finish_reason == "length"
                and spec.params.max_tokens > 1):
            self.env.process(self.handoff(spec, event))

    def handoff(self, spec: ArrivalSpec, event: TokenEvent) -> Generator[simpy.Event, Any, None]:
        """Route to a decode replica, wait for its slot and blocks, then hold a link for
        the transfer; the decode replica takes the request when it lands."""
        env, rid = self.env, spec.request_id
        info = self.info[rid]
        dest = self.decode[self.decode_router.pick(self.decode, spec.prompt_token_ids)]
        dest.outstanding += 1
        info.replica = dest.index
        info.sampled_s = event.time_s
        info.kv_bytes = kv_bytes(self.cfg.model, self.num_planes, len(spec.prompt_token_ids),
                                 self.cluster.kv_transfer.dtype_bytes)
        h = Handoff(spec, info.arrival_s, event.token_id, env.event())
        dest.pending.append(h)
        dest.wake()
        yield h.reserved
        with self.link.request() as link:
            yield link
            info.kv_transfer_s = duration = self.cluster.kv_transfer.transfer_s(info.kv_bytes)
            yield env.timeout(duration)
        h.landed_s = info.landed_s = env.now
        dest.landed.append(h)
        dest.wake()

    # ---- the run -------------------------------------------------------------------------
    def run(self) -> RunRecords:
        t0 = time.perf_counter()
        self.env.process(self.arrival_process())
        for replica in self.replicas:
            self.env.process(replica.process())
        run_without_gc(self.env)
        for replica in self.replicas:
            core = replica.core
            if core.has_work() or replica.pending or replica.landed:
                raise SimulationDeadlock(
                    f"replica {replica.index}: " + stall_message(core, self.env.now))
            replica.loop.drain()
        records = merge([(r.role, r.loop, r.busy_s) for r in self.replicas],
                        self.info)
        records.wall_s = time.perf_counter() - t0
        return records


def simulate_cluster(
    cfg: EngineConfig,
    cluster: ClusterConfig,
    source: ArrivalSource,
    cost: CostModel,
    *,
    signal_fn: SignalFn | None = None,
    seed: int = 0,
    record_batches: bool = False,
    vocab_size: int = 64,
) -> RunRecords:
    """Run ``source`` through ``cluster`` (each replica an ``EngineCore(cfg)``) in simulated
    time; the rows of every replica merged, with each request's replica and transfer
    (``records.cluster``: ``sim.cluster.records.ClusterInfo``). Raises ``SimulationDeadlock``
    if work is left that nothing can move, ValueError on a bad request."""
    executor = SeededExecutor(seed=seed, vocab_size=vocab_size, signal_fn=signal_fn)
    return ClusterRun(cfg, cluster, source, cost, executor, seed, record_batches).run()
