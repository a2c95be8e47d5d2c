"""How unlike a run's requests are, side by side for several run folders.

``python -m tools.request_spread RUN... [--markdown]`` reads each run folder (``loopserve run``,
any target; a simulated one needs ``--set outputs.tokens=true``) and prints, per arm, over the
requests of all its repeats at the reference point: TPOT (ms) at p10 / p50 / p90, the ratios
p10/p50 and p90/p50, TPOT's coefficient of variation (sd / mean) and the standard deviation of
each request's mean loops per decode token. The ratios and the CV do not depend on the
machine's speed, so a simulated and a measured run compare even where the profile's time
scale is off. With adaptive exits a request's tokens exit alike, so its loops, and its TPOT,
differ from other requests'; a simulation that draws every token from any profile row
(``exit.draw: token``) loses that spread, one that keeps a request on one measured prompt
(``request``, the default) keeps it (docs/exit-profiles.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from loopserve.outputs.rundata import load_run

_KEYS = ["arm", "repeat", "request_id"]


def spread(path: str | Path) -> dict[str, dict[str, Any]]:
    """Per arm: the TPOT percentiles, ratios and CV, and the sd of per-request mean loops."""
    run = load_run(path)
    ref = run.reference_point_id
    rq = run.requests[(run.requests.point_id == ref) & (run.requests.output_tokens > 1)].copy()
    rq["tpot_ms"] = (rq.finish_s - rq.first_token_s) / (rq.output_tokens - 1) * 1e3
    tk = run.tokens
    if tk.empty:
        raise SystemExit(f"{path}: no tokens table; rerun with --set outputs.tokens=true")
    tk = tk[(tk.point_id == ref) & (tk["index"] > 0)]
    loops = tk.groupby(_KEYS).exit_depth.mean().rename("loops")
    rq = rq.join(loops, on=_KEYS)
    out: dict[str, dict[str, Any]] = {}
    for arm, g in rq.groupby("arm", sort=False):
        p10, p50, p90 = (float(v) for v in np.percentile(g.tpot_ms, [10, 50, 90]))
        out[str(arm)] = {
            "num_requests": len(g), "tpot_p10_ms": round(p10, 3), "tpot_p50_ms": round(p50, 3),
            "tpot_p90_ms": round(p90, 3), "p10_over_p50": round(p10 / p50, 4),
            "p90_over_p50": round(p90 / p50, 4),
            "tpot_cv": round(float(g.tpot_ms.std(ddof=0) / g.tpot_ms.mean()), 4),
            "loops_sd": round(float(pd.Series(g.loops).std(ddof=0)), 4),
        }
    return out


def markdown(docs: dict[str, dict[str, dict[str, Any]]]) -> str:
    """One row per run folder and arm."""
    lines = ["| run | arm | requests | TPOT p10 / p50 / p90 ms | p10/p50 | p90/p50 | TPOT CV | "
             "loops sd |", "|---|---|---|---|---|---|---|---|"]
    for name, arms in docs.items():
        for arm, s in arms.items():
            lines.append(f"| {name} | {arm} | {s['num_requests']} | {s['tpot_p10_ms']:.2f} / "
                         f"{s['tpot_p50_ms']:.2f} / {s['tpot_p90_ms']:.2f} | "
                         f"{s['p10_over_p50']:.3f} | {s['p90_over_p50']:.3f} | "
                         f"{s['tpot_cv']:.3f} | {s['loops_sd']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table too")
    args = ap.parse_args()
    docs = {str(r): spread(r) for r in args.runs}
    print(json.dumps(docs))
    if args.markdown:
        print(markdown(docs))


if __name__ == "__main__":
    main()
