"""The report's prefix-cache table: per point and arm with ``cache.enable_prefix_caching``
on, vLLM's hit rate (hit / queried prompt tokens), blocks evicted, and TTFT and ITL against
the same point with caching off when the run has one (a sweep over the flag)."""

from __future__ import annotations

from collections.abc import Sequence

from loopserve.outputs.rundata import RunData
from loopserve.stats.metrics import metric
from loopserve.stats.summary import MedianRow

FLAG = "cache.enable_prefix_caching"
HEAD = ("run", "point", "values", "arm", "queried tokens", "hit tokens", "hit rate",
        "blocks evicted", "TTFT p50 (ms)", "uncached TTFT p50", "TTFT p50 ratio",
        "ITL p50 (ms)", "uncached ITL p50", "ITL p99 (ms)", "uncached ITL p99")


def _uncached_point(run: RunData, point_id: int) -> int | None:
    """The point with the same values but caching off, if the run swept the flag."""
    values = run.point_values(point_id)
    if FLAG not in values:
        return None
    want = {**values, FLAG: False}
    for p in run.points:
        if dict(p["values"]) == want:
            return int(p["point_id"])
    return None


def prefix_cache_rows(runs: Sequence[RunData]) -> list[list[object]]:
    """One row per median row with prefix-cache metrics: plain values (None where absent),
    in ``HEAD``'s order; [] when no run had caching on."""
    rows: list[list[object]] = []
    for run in runs:
        medians = run.summary["medians"]
        by_key: dict[tuple[int, str], MedianRow] = {(m["point_id"], m["arm"]): m for m in medians}
        for m in medians:
            if "prefix_cache_hit_tokens" not in m:
                continue
            off_id = _uncached_point(run, m["point_id"])
            off = None if off_id is None else by_key.get((off_id, m["arm"]))
            ttft, ttft_off = metric(m, "ttft_ms", "p50"), metric(off, "ttft_ms", "p50")
            values = run.point_values(m["point_id"])
            rows.append([
                run.label, m["point_id"],
                ", ".join(f"{k}={v}" for k, v in values.items() if k != FLAG) or "base",
                m["arm"], m.get("prefix_cache_queried_tokens"), m.get("prefix_cache_hit_tokens"),
                m.get("prefix_cache_hit_rate"), m.get("prefix_cache_evicted_blocks"),
                ttft, ttft_off, None if ttft is None or not ttft_off else ttft / ttft_off,
                metric(m, "itl_ms", "p50"), metric(off, "itl_ms", "p50"),
                metric(m, "itl_ms", "p99"), metric(off, "itl_ms", "p99"),
            ])
    return rows
