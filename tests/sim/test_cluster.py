"""Replicas behind a router (sim.cluster): one replica is the plain engine to the bit, round
robin spreads evenly, least_outstanding at low load is the single engine, prefix affinity
keeps a prefix on one replica, and a run is deterministic for its seed."""

from __future__ import annotations

import pickle
import random
from collections import Counter

import pytest

from engine.core import SamplingParams
from engine.core.records import ArrivalSpec, RunRecords
from engine.core.shapes import TINY
from sim import make_cost_model, simulate
from sim.cluster import ClusterConfig, cluster_info, simulate_cluster
from tests.helpers import ListSource, make_config

ARMS = ("atomic", "per_depth", "mixed")
COST = make_cost_model("roofline", TINY, hardware="h200")


def workload(n: int = 40, rate: float = 50.0, seed: int = 1,
             prefixes: int = 0) -> list[ArrivalSpec]:
    rng = random.Random(seed)
    heads = [tuple(rng.randrange(1, 60) for _ in range(8)) for _ in range(prefixes)]
    out, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        prompt = tuple(rng.randrange(1, 60) for _ in range(rng.randint(1, 30)))
        if heads:
            prompt = heads[i % len(heads)] + prompt
        out.append(ArrivalSpec(f"r{i}", prompt, SamplingParams(
            max_tokens=rng.randint(1, 12), ignore_eos=True), t))
    return out


def rows(rec: RunRecords) -> tuple[list, list, list]:  # type: ignore[type-arg]
    return list(rec.steps), list(rec.tokens), list(rec.requests)


@pytest.mark.parametrize("prefix_caching", [False, True])
@pytest.mark.parametrize("arm", ARMS)
def test_one_replica_is_the_plain_engine_to_the_bit(arm: str, prefix_caching: bool) -> None:
    cfg = make_config(arm, prefix_caching=prefix_caching)
    specs = workload(prefixes=3 if prefix_caching else 0)
    # an injected request triggered by a token, routed like any arrival
    inject = ArrivalSpec("inj", tuple(range(1, 20)), SamplingParams(max_tokens=3,
                                                                   ignore_eos=True),
                         None, injected=True)
    source = ListSource(specs, {("r3", 2): [inject]})
    plain = simulate(cfg, source, COST)
    one = simulate_cluster(cfg, ClusterConfig(router="least_kv"), source, COST)
    assert rows(one) == rows(plain)
    assert one.prefix_cache == plain.prefix_cache
    assert len(plain.requests) == len(specs) + 1


@pytest.mark.parametrize("arm", ARMS)
def test_round_robin_spreads_within_one_and_every_request_finishes_once(arm: str) -> None:
    specs = workload(n=41)
    rec = simulate_cluster(make_config(arm), ClusterConfig(num_replicas=4), ListSource(specs),
                           COST)
    ids = [q.request_id for q in rec.requests]
    assert sorted(ids) == sorted(s.request_id for s in specs)  # each once
    info = cluster_info(rec)
    assert info is not None
    counts = Counter(info.info[rid].replica for rid in ids)
    assert set(counts) == {0, 1, 2, 3}
    assert max(counts.values()) - min(counts.values()) <= 1
    # arrival order: the i-th arrival goes to replica i mod 4
    assert all(info.info[s.request_id].replica == i % 4 for i, s in enumerate(specs))
    # every output token was emitted once, by the replica the request went to
    assert len(rec.tokens) == sum(q.output_tokens for q in rec.requests)
    assert sorted(info.step_replica) == list(info.step_replica)  # replica by replica


@pytest.mark.parametrize("arm", ARMS)
def test_least_outstanding_at_low_load_equals_the_single_engine(arm: str) -> None:
    # one request at a time: each finds an idle replica, so its latencies are a lone engine's
    specs = workload(n=12, rate=0.5)
    cfg = make_config(arm)
    plain = simulate(cfg, ListSource(specs), COST)
    rec = simulate_cluster(cfg, ClusterConfig(num_replicas=3, router="least_outstanding"),
                           ListSource(specs), COST)
    assert plain.requests[-1].finish_s < 1e9

    def latencies(r: RunRecords) -> dict[str, tuple[float, float]]:
        return {q.request_id: (q.first_token_s - q.arrival_s, q.finish_s - q.arrival_s)
                for q in r.requests}

    single, cluster = latencies(plain), latencies(rec)
    assert set(single) == set(cluster)
    for rid, (ttft, e2el) in single.items():
        assert cluster[rid] == pytest.approx((ttft, e2el), rel=1e-9, abs=1e-12)
    info = cluster_info(rec)
    assert info is not None and len({w.replica for w in info.info.values()}) > 1  # it spread


def test_least_outstanding_avoids_the_busy_replica() -> None:
    # two long requests at once, then a third: it goes to neither busy replica
    long = SamplingParams(max_tokens=50, ignore_eos=True)
    specs = [ArrivalSpec(f"r{i}", tuple(range(1, 9)), long, 0.001 * i) for i in range(3)]
    rec = simulate_cluster(make_config("atomic"),
                           ClusterConfig(num_replicas=3, router="least_outstanding"),
                           ListSource(specs), COST)
    info = cluster_info(rec)
    assert info is not None
    assert sorted(info.info[f"r{i}"].replica for i in range(3)) == [0, 1, 2]


def test_prefix_affinity_keeps_a_prefix_on_one_replica_and_its_cache_pays() -> None:
    specs = workload(n=60, prefixes=3)  # round robin spreads each prefix over all four
    cfg = make_config("atomic", prefix_caching=True, block_size=4)
    source = ListSource(specs)
    aff = simulate_cluster(cfg, ClusterConfig(num_replicas=4, router="prefix_affinity",
                                              affinity_blocks=2), source, COST)
    rr = simulate_cluster(cfg, ClusterConfig(num_replicas=4), source, COST)
    info = cluster_info(aff)
    assert info is not None
    by_prefix: dict[tuple[int, ...], set[int]] = {}
    for s in specs:
        by_prefix.setdefault(s.prompt_token_ids[:8], set()).add(info.info[s.request_id].replica)
    assert all(len(replicas) == 1 for replicas in by_prefix.values())
    assert aff.prefix_cache is not None and rr.prefix_cache is not None
    assert aff.prefix_cache.hit_tokens > rr.prefix_cache.hit_tokens


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding", "least_kv",
                                    "prefix_affinity"])
def test_same_seed_same_bytes(router: str) -> None:
    specs = workload(n=30, rate=200.0)
    cfg = make_config("mixed")
    cluster = ClusterConfig(num_replicas=3, router=router)  # type: ignore[arg-type]

    def run(seed: int) -> bytes:
        rec = simulate_cluster(cfg, cluster, ListSource(specs), COST, seed=seed)
        info = cluster_info(rec)
        assert info is not None
        return pickle.dumps((rows(rec), sorted((k, repr(v)) for k, v in info.info.items())))

    assert run(3) == run(3)


def test_utilisation_terms_add_up() -> None:
    specs = workload(n=30)
    rec = simulate_cluster(make_config("per_depth"), ClusterConfig(num_replicas=2),
                           ListSource(specs), COST)
    info = cluster_info(rec)
    assert info is not None
    durations = [0.0, 0.0]
    for s, r in zip(rec.steps, info.step_replica, strict=True):
        durations[r] += s.end_s - s.start_s
    assert info.replica_busy_s == pytest.approx(durations)
    assert sum(info.replica_served_tokens) == sum(q.prompt_tokens + q.output_tokens
                                                  for q in rec.requests)
