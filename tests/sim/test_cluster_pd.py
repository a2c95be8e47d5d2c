"""Prefill/decode disaggregation (sim.cluster): the KV transfer against a hand count, link
contention, an ideal link, back-pressure without drops, and properties over random
clusters and workloads (Hypothesis).

The first token is sampled by the prefill replica (its atomic PREFILL steps, then CODA) and
reaches the client when its KV lands on the decode replica: TTFT = queueing + prefill +
transfer (waiting for the decode replica's blocks and a link, then the wire)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core import SamplingParams
from engine.core.records import ArrivalSpec
from engine.core.seeded_executor import SeededExecutor
from engine.core.shapes import TINY
from sim import make_cost_model, simulate
from sim.cluster import ClusterConfig, KvTransferConfig, cluster_info, simulate_cluster
from sim.cluster.driver import ClusterRun
from tests.helpers import ListSource, make_config

ARMS = ("atomic", "per_depth", "mixed")
CALL_S = 0.001
COST = make_cost_model("constant", TINY, core_call_s=CALL_S)
# TINY: 2 layers x 4 depth planes x (K, V) x 2 KV heads x head dim 8 x 2 bytes per position
BYTES_PER_POSITION = 2 * 4 * 2 * 2 * 8 * 2
SLOW = KvTransferConfig(bandwidth_gbps=0.001, latency_us=100.0)  # 1 Mbit/s: visible times


def spec(rid: str, prompt: int, max_tokens: int, at: float = 0.0) -> ArrivalSpec:
    return ArrivalSpec(rid, tuple(range(1, prompt + 1)),
                       SamplingParams(max_tokens=max_tokens, ignore_eos=True), at)


def pd(p: int = 1, q: int = 1, kv: KvTransferConfig = SLOW, **kw: object) -> ClusterConfig:
    return ClusterConfig(num_replicas=p + q, num_prefill_replicas=p, num_decode_replicas=q,
                         kv_transfer=kv, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("arm", ARMS)
def test_idle_link_transfer_is_bytes_over_bandwidth_plus_latency(arm: str) -> None:
    rec = simulate_cluster(make_config(arm), pd(), ListSource([spec("a", 16, 3)]), COST)
    info = cluster_info(rec)
    assert info is not None
    a = info.info["a"]
    assert a.kv_bytes == 16 * BYTES_PER_POSITION == 8192
    wire = 8192 * 8 / 1e6 + 100e-6  # 65.536 ms on 1 Mbit/s, plus 100 us
    assert a.kv_transfer_s == pytest.approx(wire, rel=1e-12)
    # prefill replica (atomic whatever the arm): 2 chunks x 4 depths + CODA = 9 calls
    assert a.sampled_s == pytest.approx(9 * CALL_S)
    assert a.landed_s == pytest.approx(9 * CALL_S + wire)
    (req,) = rec.requests
    assert (req.first_token_s, a.prefill_replica, a.replica) == (a.landed_s, 0, 1)
    # then two tokens on the decode replica, PRELUDE + 4 RECURRENT + CODA each
    assert [t.time_s for t in rec.tokens] == pytest.approx(
        [a.landed_s, a.landed_s + 6 * CALL_S, a.landed_s + 12 * CALL_S])
    assert req.output_tokens == 3 and req.finish_reason == "length"
    stages = {s.stage for s, r in zip(rec.steps, info.step_replica, strict=True) if r == 0}
    assert stages == {"PREFILL", "CODA"}  # the arm does not apply to a prefill replica
    assert all(s.num_prompt_items == 0
               for s, r in zip(rec.steps, info.step_replica, strict=True) if r == 1)


@pytest.mark.parametrize("links", [1, 2])
def test_overlapping_transfers_wait_for_a_free_link(links: int) -> None:
    kv = KvTransferConfig(bandwidth_gbps=0.001, latency_us=100.0, links=links)
    rec = simulate_cluster(make_config("atomic"), pd(p=2, q=1, kv=kv),
                           ListSource([spec("a", 16, 3), spec("b", 16, 3)]), COST)
    info = cluster_info(rec)
    assert info is not None
    wire = kv.transfer_s(8192)
    a, b = info.info["a"], info.info["b"]
    assert (a.prefill_replica, b.prefill_replica) == (0, 1)
    assert a.sampled_s == b.sampled_s == pytest.approx(9 * CALL_S)
    landed = sorted([a.landed_s, b.landed_s])  # type: ignore[type-var]
    second = 2 * wire if links == 1 else wire
    assert landed == pytest.approx([9 * CALL_S + wire, 9 * CALL_S + second])
    assert a.kv_transfer_s == b.kv_transfer_s == pytest.approx(wire)  # time on the link


@pytest.mark.parametrize("arm", ARMS)
def test_an_ideal_link_gives_ttft_equal_to_the_prefill_time(arm: str) -> None:
    ideal = KvTransferConfig(bandwidth_gbps=math.inf, latency_us=0.0)
    rec = simulate_cluster(make_config(arm), pd(kv=ideal), ListSource([spec("a", 16, 3)]),
                           COST)
    # the prefill time: the same prompt on a lone atomic engine, to its first token
    lone = simulate(make_config("atomic"), ListSource([spec("a", 16, 1)]), COST)
    (req,) = rec.requests
    assert req.first_token_s - req.arrival_s == lone.requests[0].first_token_s == 9 * CALL_S


def test_back_pressure_makes_transfers_wait_and_drops_nothing() -> None:
    # 30 blocks: a 22-token lifetime takes 6 blocks x 4 planes, so one request at a time
    cfg = make_config("atomic", num_blocks=30)
    kv = KvTransferConfig(bandwidth_gbps=1.0, latency_us=10.0)
    specs = [spec(f"r{i}", 16, 7) for i in range(6)]
    run = ClusterRun(cfg, pd(p=2, q=1, kv=kv), ListSource(specs), COST, SeededExecutor(),
                     0, False)
    rec = run.run()
    info = cluster_info(rec)
    assert info is not None
    assert sorted(q.request_id for q in rec.requests) == [s.request_id for s in specs]
    assert all(q.output_tokens == 7 for q in rec.requests)
    waited = [w.landed_s - w.sampled_s - w.kv_transfer_s  # type: ignore[operator]
              for w in info.info.values()]
    assert max(waited) > 0.01  # later ones waited for the decode replica's blocks
    decode_steps = [s for s, r in zip(rec.steps, info.step_replica, strict=True) if r == 2]
    assert max(s.num_decode_items for s in decode_steps) == 1
    for replica in run.replicas:
        bm = replica.core.block_manager
        bm.check_integrity()
        assert bm.num_used_blocks == 0 and bm.num_reserved_blocks == 0


def test_a_first_token_that_ends_the_request_never_moves() -> None:
    rec = simulate_cluster(make_config("mixed"), pd(), ListSource([spec("a", 5, 1)]), COST)
    info = cluster_info(rec)
    assert info is not None
    a = info.info["a"]
    assert a.landed_s is None and a.kv_bytes == 0 and a.replica == 0
    assert rec.requests[0].first_token_s == pytest.approx(2 * CALL_S + 3 * CALL_S)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[object, ...]:
    if draw(st.booleans()):
        p, q = draw(st.integers(1, 2)), draw(st.integers(1, 2))
        cluster = pd(p, q, kv=KvTransferConfig(
            bandwidth_gbps=draw(st.sampled_from([0.01, 1.0, math.inf])),
            latency_us=draw(st.sampled_from([0.0, 50.0])), links=draw(st.integers(1, 2))),
            router=draw(st.sampled_from(["round_robin", "least_outstanding", "least_kv",
                                         "prefix_affinity"])))
    else:
        cluster = ClusterConfig(num_replicas=draw(st.integers(1, 3)), router=draw(
            st.sampled_from(["round_robin", "least_outstanding", "least_kv",
                             "prefix_affinity"])))
    arm = draw(st.sampled_from(ARMS))
    cfg = make_config(arm, max_num_seqs=draw(st.integers(1, 4)),
                      num_blocks=draw(st.integers(28, 120)),
                      incremental=draw(st.booleans()), prefix_caching=draw(st.booleans()))
    n = draw(st.integers(1, 14))
    times = sorted(draw(st.lists(st.floats(0.0, 0.05), min_size=n, max_size=n)))
    specs = [ArrivalSpec(f"r{i}", tuple(draw(st.lists(st.integers(1, 6), min_size=1,
                                                      max_size=20))),
                         SamplingParams(max_tokens=draw(st.integers(1, 8)), ignore_eos=True),
                         t) for i, t in enumerate(times)]
    return cluster, cfg, specs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_every_request_finishes_once_and_every_block_returns(case: tuple) -> None:  # type: ignore[type-arg]
    cluster, cfg, specs = case
    run = ClusterRun(cfg, cluster, ListSource(specs), COST, SeededExecutor(), 0, False)
    rec = run.run()
    assert sorted(q.request_id for q in rec.requests) == sorted(s.request_id for s in specs)
    assert sum(q.output_tokens for q in rec.requests) == len(rec.tokens)
    by_id = {s.request_id: s for s in specs}
    assert all(q.output_tokens == by_id[q.request_id].params.max_tokens for q in rec.requests)
    info = cluster_info(rec)
    assert info is not None
    sched = cfg.scheduler
    last_end = [0.0] * len(run.replicas)
    for s, r in zip(rec.steps, info.step_replica, strict=True):
        assert s.num_decode_items <= sched.max_num_seqs  # no replica past its budget
        assert s.num_prompt_tokens <= sched.max_num_batched_tokens
        assert s.start_s >= last_end[r]  # one step at a time per replica
        last_end[r] = s.end_s
    for replica in run.replicas:
        bm = replica.core.block_manager
        bm.check_integrity()
        assert bm.num_used_blocks == 0 and bm.num_reserved_blocks == 0
        assert not replica.core.has_work()
