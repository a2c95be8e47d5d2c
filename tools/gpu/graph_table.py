"""The GPU path's part of the final table: core call time per configuration and shape
against the weight floor, graph replay against eager, FA4 against torch_ref, and the A0/A1/A2
run with the fastest validated configuration beside the eager one."""

from __future__ import annotations

from typing import Any


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    if "median_s" not in row:
        return "n/a" if "not available" in str(row.get("error")) else "FAILED"
    return f"{row['median_s'] * 1e3:.3f} ({row['over_floor']:.1f}x)"


def graph_lines(results: dict[str, Any]) -> list[str]:
    """Lines for the table (none when the GPU-path stages did not measure)."""
    lines: list[str] = []
    graphs = results.get("graphs") or {}
    rows = graphs.get("rows") or []
    if rows:
        labels = list(dict.fromkeys(r["label"] for r in rows))
        lines.append(f"core call ms (x weight floor {graphs['floor_s'] * 1e3:.4f} ms), "
                     f"context {graphs.get('context')}")
        lines.append(f"  {'config':<22} " + " ".join(f"{lab:>16}" for lab in labels))
        by = {(r["config"], r["label"]): r for r in rows}
        for config in dict.fromkeys(r["config"] for r in rows):
            lines.append(f"  {config:<22} "
                         + " ".join(f"{_cell(by.get((config, lab))):>16}" for lab in labels))
    for backend, e in ((results.get("graph_tokens") or {}).get("backends") or {}).items():
        verdict = e.get("error") or ("identical" if e.get("identical") else
                                     f"{len(e['requests_differing'])} requests differ")
        lines.append(f"graph replay vs eager ({backend}): {verdict}")
    for s in (results.get("fa4") or {}).get("shapes") or []:
        lines.append(f"fa4 vs torch_ref {s['kind']:<7} rel err {s['rel_error']:.1e}"
                     + ("" if s["ok"] else " FAILED"))
    runs = results.get("graph_runs") or {}
    if runs:
        eager, best = runs.get("eager_ratios") or {}, runs.get("ratios") or {}
        lines.append(f"A2/A0 with {runs['config']} (beside eager {runs['eager']}): ITL p99 "
                     f"{best.get('itl_p99')} (eager {eager.get('itl_p99')}), output tok/s "
                     f"{best.get('output_tok_s')} (eager {eager.get('output_tok_s')})")
    return lines
