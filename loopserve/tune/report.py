"""What ``loopserve tune`` shows: the Pareto plot (capacity against ITL p99 at capacity, one
marker per arm) and the report section (the top configurations and the gain over the
default), printed and written as ``report.md``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from loopserve.report.style import ARM_MARKERS, arm_color, png_bytes  # noqa: E402

NUM_SHOWN = 5


def _key(objective: str) -> str:
    return "capacity_req_s" if objective == "capacity" else "capacity_per_gpu"


def pareto_png(entries: Sequence[Mapping[str, Any]], objective: str) -> bytes:
    """Each ranked configuration's capacity against its ITL p99 at capacity; the Pareto
    front (more capacity for no more ITL) drawn as a line, defaults hollow."""
    key = _key(objective)
    pts = [(e["at_capacity"].get("itl_p99_ms"), e[key], e) for e in entries
           if e["status"] in ("found", "above_max_rate") and e["at_capacity"]
           and e["at_capacity"].get("itl_p99_ms") is not None]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for arm in dict.fromkeys(e["arm"] for _, _, e in pts):
        mine = [(x, y, e) for x, y, e in pts if e["arm"] == arm]
        color, marker = arm_color(arm), ARM_MARKERS.get(arm, "o")
        ax.scatter([x for x, _, e in mine if not e["is_default"]],
                   [y for _, y, e in mine if not e["is_default"]],
                   marker=marker, color=color, label=arm, s=36)
        dflt = [(x, y) for x, y, e in mine if e["is_default"]]
        if dflt:
            ax.scatter([x for x, _ in dflt], [y for _, y in dflt], marker=marker, s=60,
                       facecolors="white", edgecolors=color, label=f"{arm} (default)")
    front, best_y = [], float("-inf")
    for x, y, _ in sorted(pts, key=lambda p: (p[0], -p[1])):
        if y > best_y:
            front.append((x, y))
            best_y = y
    if front:
        ax.step([x for x, _ in front], [y for _, y in front], where="post", color="black",
                lw=0.8, ls="--", label="Pareto front")
    ax.set_xlabel("ITL p99 at capacity (ms)")
    ax.set_ylabel("capacity (req/s)" if objective == "capacity" else "capacity per GPU (req/s)")
    ax.grid(True, alpha=0.3)
    if pts:
        ax.legend(fontsize=8)
    ax.set_title("tune: capacity against ITL p99 at capacity, per configuration", fontsize=9)
    return png_bytes(fig)


def _fmt(value: Any, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def report_md(doc: Mapping[str, Any]) -> str:
    """The report section: top configurations, the gain over the default, per arm too."""
    key = _key(doc["objective"])
    by_id = {e["config_id"]: e for e in doc["configurations"]}
    s = doc["summary"]
    lines = [f"## Tune: {doc['scenario']} ({doc['objective']})", ""]
    best, dflt = by_id.get(s["best_config_id"]), by_id.get(s["default_config_id"])
    if best is not None:
        lines.append(f"Best: {_fmt(best[key])} req/s{' per GPU' if key != 'capacity_req_s' else ''}"
                     f" with `{_label(best)}`; default {_fmt(dflt and dflt[key])}"
                     f" (`{_label(dflt)}`); gain x{_fmt(s['gain_over_default'], '.3g')}.")
    else:
        lines.append("No configuration's search ended with a capacity (none met the SLO, or "
                     "the budget stopped them first).")
    estimate = s["num_probes_full_grid_estimate"]
    lines += ["", f"{s['num_configurations']} configurations ({s['num_rejected']} rejected, "
              f"{s['num_stopped']} stopped early); {s['num_probes']} probes run"
              + (f", about {estimate:g} for the full grid." if estimate is not None else "."), "",
              "| rank | configuration | capacity | bracket | bound by | ITL p99 | TTFT p99 |",
              "|---|---|---|---|---|---|---|"]
    for rank, cid in enumerate(s["ranking"][:max(NUM_SHOWN, doc["top"])], 1):
        e = by_id[cid]
        at = e["at_capacity"] or {}
        lines.append(f"| {rank} | `{_label(e)}`{' (default)' if e['is_default'] else ''} | "
                     f"{_fmt(e[key])} | [{_fmt(e['low_req_s'])}, {_fmt(e['high_req_s'])}) | "
                     f"{e['bound_by'] or '-'} | {_fmt(at.get('itl_p99_ms'))} | "
                     f"{_fmt(at.get('ttft_p99_ms'))} |")
    lines += ["", "| arm | best | default | gain |", "|---|---|---|---|"]
    for arm, a in s["per_arm"].items():
        mark = "" if a["best_exact"] or a["best"] is None else " (at least)"
        lines.append(f"| {arm} | {_fmt(a['best'])}{mark} | {_fmt(a['default'])} | "
                     f"{'-' if a['gain'] is None else 'x' + format(a['gain'], '.3g')} |")
    rejected = [e for e in doc["configurations"] if e["status"] == "rejected"]
    if rejected:
        lines += ["", "Rejected:"] + [f"- `{_label(e)}`: {e['reason']}" for e in rejected]
    return "\n".join(lines) + "\n"


def _label(e: Mapping[str, Any] | None) -> str:
    if e is None:
        return "-"
    return " ".join(f"{k}={'default' if v is None else v}" for k, v in e["values"].items())
