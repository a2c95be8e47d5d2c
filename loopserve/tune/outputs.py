"""The tune folder's files: ``tune.json`` (settings, every configuration, the ranking),
``tune.csv`` (one row per configuration), ``best.yaml`` (the scenario with the best
configuration filled in and its one arm, ready for ``loopserve run`` / ``capacity``),
``pareto.png``, ``report.md`` and ``env.json``. Each file is written whole (``atomic_write``);
``probes.jsonl`` and ``search.json`` (the probe store) stay beside them."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import yaml

from loopserve.outputs import env_info, files
from loopserve.runs.capacity_probe import Criterion
from loopserve.schema.scenario import Scenario
from loopserve.tune.probe import REPORTED
from loopserve.tune.report import pareto_png, report_md
from loopserve.tune.results import entry, summary
from loopserve.tune.search import Settings, Track
from loopserve.tune.space import ARM, Config, configure


def document(scn: Scenario, configs: list[Config], tracks: list[Track], crit: Criterion,
             s: Settings, objective: str) -> dict[str, Any]:
    """tune.json's content (deterministic: no wall times)."""
    by_id = {t.config.config_id: t for t in tracks}
    entries = [entry(by_id[c.config_id], crit) if c.config_id in by_id
               else entry(Track(c, 1), crit) for c in configs]
    space = {ARM: list(scn.arms)} if scn.tune and ARM not in scn.tune else {}
    space.update(scn.tune or {})
    return {"scenario": scn.name, "target": "sim", "objective": objective,
            "workload": scn.workload.kind, "repeats": scn.repeats, "seed": scn.seed,
            "criterion": {"slo": crit.limits, "goodput_fraction": crit.goodput_fraction,
                          "goodput": crit.goodput},
            "tolerance": s.tolerance, "start_rate": s.start, "factor": s.factor,
            "max_steps": s.max_steps, "top": s.top, "early_stopping": s.prune,
            "budget": s.budget, "space": space,
            "summary": summary(entries, objective), "configurations": entries}


def best_scenario(scn: Scenario, doc: dict[str, Any]) -> Scenario | None:
    """The scenario with the best configuration's values and arm (None: nothing met)."""
    cid = doc["summary"]["best_config_id"]
    if cid is None:
        return None
    best = next(e for e in doc["configurations"] if e["config_id"] == cid)
    tuned = configure(scn, best["values"])
    workload = dict(tuned.workload.model_dump(exclude_unset=True),
                    request_rate=doc["start_rate"])
    data = tuned.model_dump(mode="json", exclude_none=True)
    data.update(name=f"{scn.name}-tuned", workload=workload)
    return Scenario.model_validate(data)


def _csv(doc: dict[str, Any]) -> str:
    crit_cols = list(doc["criterion"]["slo"]) + (
        ["goodput_fraction"] if doc["criterion"]["goodput_fraction"] else [])
    cols = crit_cols + [k for k in REPORTED if k not in crit_cols]
    keys = list(doc["space"])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["config_id", *keys, "is_default", "status", "capacity_req_s",
                "capacity_per_gpu", "low_req_s", "high_req_s", "bound_by", "num_probes",
                *(f"{c}_at_capacity" for c in cols), "reason"])
    for e in doc["configurations"]:
        at = e.get("at_capacity") or {}
        w.writerow([e["config_id"], *(e["values"].get(k) for k in keys), e["is_default"],
                    e["status"], e["capacity_req_s"], e["capacity_per_gpu"], e.get("low_req_s"),
                    e.get("high_req_s"), e.get("bound_by"), e["num_probes"],
                    *(at.get(c) for c in cols), e["reason"]])
    return buf.getvalue()


def write(dest: Path, scn: Scenario, doc: dict[str, Any], *, argv: list[str],
          started: float) -> None:
    """Every output file, each written whole."""
    tune = {k: v for k, v in doc.items() if k != "verify"}
    items: list[tuple[Path, str | bytes]] = [
        (dest / "tune.json", json.dumps(tune, indent=2, allow_nan=False) + "\n"),
        (dest / "tune.csv", _csv(doc)),
        (dest / "pareto.png", pareto_png(doc["configurations"], doc["objective"])),
        (dest / "report.md", report_text(doc)),
        (dest / "env.json", json.dumps(env_info.collect(
            target="sim", hardware=scn.hardware, run_id=dest.name, argv=argv,
            started_s=started, run_wall_s=[]), indent=2) + "\n")]
    if "verify" in doc:  # measured: not part of the deterministic tune.json
        items.append((dest / "verify.json", json.dumps(doc["verify"], indent=2) + "\n"))
    best = best_scenario(scn, doc)
    if best is not None:
        data = best.model_dump(mode="json", exclude_none=True)
        items.append((dest / "best.yaml", yaml.safe_dump(data, sort_keys=False,
                                                         allow_unicode=True)))
    files.atomic_write_all(items)


def report_text(doc: dict[str, Any]) -> str:
    """The report section (and the verification table, when verified)."""
    if "verify" not in doc:
        return report_md(doc)
    from loopserve.tune.verify import verify_md
    return report_md(doc) + verify_md(doc["verify"])
