"""tune.json's document: every configuration's outcome, ranked, with the best one, the
defaults and what the search cost.

A configuration's ``status``: ``found`` / ``above_max_rate`` / ``below_min_rate`` (its search
ended, as ``loopserve capacity``'s), ``pruned`` (stopped early: it cannot reach the top K),
``budget`` (stopped when ``--budget`` ran out) or ``rejected`` (never run; ``reason`` says
why). ``bound_by`` names what failed at the rate just above capacity: the criterion metric
furthest past its limit (``ITL``, ``TTFT``, ``TPOT``, ``E2EL``), ``goodput``, ``invalid``;
``max_rate`` when even the highest rate met.
"""

from __future__ import annotations

from typing import Any

from loopserve.runs.capacity_probe import Criterion
from loopserve.tune.probe import REPORTED, ProbeResult
from loopserve.tune.search import Track

RANKED = ("found", "above_max_rate")


def bound_by(probe: ProbeResult | None, crit: Criterion) -> str | None:
    """What made ``probe`` (the failed rate above capacity) miss the criterion."""
    if probe is None:
        return None
    worst: tuple[float, str] | None = None
    for key, limit in crit.limits.items():
        value = probe.values.get(key)
        if value is not None and value > limit:
            ratio = value / limit
            if worst is None or ratio > worst[0]:
                worst = (ratio, key.split("_")[0].upper())
    frac = probe.values.get("goodput_fraction")
    if crit.goodput_fraction is not None and frac is not None and frac < crit.goodput_fraction:
        ratio = crit.goodput_fraction / frac if frac > 0 else float("inf")
        if worst is None or ratio > worst[0]:
            worst = (ratio, "goodput")
    if worst is not None:
        return worst[1]
    return "invalid" if not probe.valid else probe.reason


def entry(track: Track, crit: Criterion) -> dict[str, Any]:
    """One configuration's row of tune.json."""
    c = track.config
    out: dict[str, Any] = {"config_id": c.config_id, "values": c.values, "arm": c.arm,
                           "is_default": c.is_default, "num_gpus": track.gpus}
    if c.rejected is not None:
        return {**out, "status": "rejected", "reason": c.rejected, "capacity_req_s": None,
                "capacity_per_gpu": None, "num_probes": 0}
    res = track.result
    status = res.status if res is not None else track.stopped
    low, high = (res.low, res.high) if res is not None else (track.low, track.high)
    cap = low if res is not None else None
    at_cap = track.probes.get(low) if low is not None else None
    at_high = track.probes.get(high) if high is not None else None
    order = [p.rate for p in res.probes] if res is not None else list(track.probes)
    return {**out, "status": status, "reason": None, "capacity_req_s": cap,
            "capacity_per_gpu": None if cap is None else cap / track.gpus,
            "low_req_s": low, "high_req_s": high,
            "bound_by": "max_rate" if status == "above_max_rate" else bound_by(at_high, crit),
            "at_capacity": None if at_cap is None or cap is None else {
                **{k: at_cap.values.get(k) for k in crit.columns},
                **{k: at_cap.latencies.get(k) for k in REPORTED if k not in crit.columns}},
            "num_probes": len(track.probes),
            "probes": [{"rate": r, "meets": track.probes[r].meets,
                        "valid": track.probes[r].valid, **track.probes[r].values,
                        "reason": track.probes[r].reason} for r in order]}


def ranked(entries: list[dict[str, Any]], objective: str) -> list[dict[str, Any]]:
    """The configurations whose search ended with a capacity, best first (ties: the
    earlier configuration)."""
    key = "capacity_req_s" if objective == "capacity" else "capacity_per_gpu"
    done = [e for e in entries if e["status"] in RANKED and e[key] is not None]
    return sorted(done, key=lambda e: (-e[key], e["config_id"]))


def summary(entries: list[dict[str, Any]], objective: str) -> dict[str, Any]:
    """The ranking, the best configuration, the defaults and the gain over them."""
    key = "capacity_req_s" if objective == "capacity" else "capacity_per_gpu"
    order = ranked(entries, objective)
    best = order[0] if order else None
    defaults = [e for e in entries if e["is_default"]]
    scored = [e for e in defaults if e["status"] in RANKED and e[key] is not None]
    default = max(scored, key=lambda e: (e[key], -e["config_id"])) if scored else None
    per_arm = {}
    for arm in dict.fromkeys(e["arm"] for e in entries):
        top = next((e for e in order if e["arm"] == arm), None)
        dflt = next((e for e in defaults if e["arm"] == arm), None)
        dcap = dflt[key] if dflt is not None and dflt["status"] in RANKED else None
        # exact: no stopped configuration of the arm could still have beaten its best
        exact = top is not None and all(
            e["high_req_s"] is not None and e["high_req_s"] / e["num_gpus"] <= top[key]
            for e in entries if e["arm"] == arm and e["status"] in ("pruned", "budget"))
        per_arm[arm] = {"best_config_id": top and top["config_id"],
                        "best": top and top[key], "best_exact": exact,
                        "default_config_id": dflt and dflt["config_id"], "default": dcap,
                        "gain": top[key] / dcap if top and dcap else None}
    stopped = [e for e in entries if e["status"] in ("pruned", "budget")]
    finished = [e["num_probes"] for e in entries if e["status"] in RANKED + ("below_min_rate",)]
    mean = sum(finished) / len(finished) if finished else 0.0
    return {"ranking": [e["config_id"] for e in order],
            "best_config_id": best and best["config_id"],
            "default_config_id": default and default["config_id"],
            "gain_over_default": best[key] / default[key] if best and default else None,
            "per_arm": per_arm,
            "num_configurations": len(entries),
            "num_rejected": sum(e["status"] == "rejected" for e in entries),
            "num_stopped": len(stopped),
            "num_probes": sum(e["num_probes"] for e in entries),
            # the stopped searches taken to the finished ones' mean length (None: none ended)
            "num_probes_full_grid_estimate": round(
                sum(e["num_probes"] for e in entries)
                + sum(max(0.0, mean - e["num_probes"]) for e in stopped), 1) if finished
            else None}
