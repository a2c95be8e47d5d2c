"""Pure helpers of ``tools.gpu.check``: the device machine's output limits, packing run
folders, reading pytest's JUnit report and A2/A0 ratios from ``summary.json``, and the final
table. Standard library only
(the GPU image runs this before any wheel is installed).
"""

from __future__ import annotations

import json
import re
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from tools.gpu.graph_table import graph_lines

# What comes back from $OUT on the device machine (docs/gpu.md, "Outputs").
MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2**20
MAX_DEPTH = 2  # folders below $OUT
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def limit_problems(out: Path) -> list[str]:
    """Every way ``out`` breaks the limits: file count, file size, folder depth, names."""
    problems = []
    files = [p for p in sorted(out.rglob("*")) if not p.is_dir()]
    if len(files) > MAX_FILES:
        problems.append(f"{len(files)} files (at most {MAX_FILES})")
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out)
        if not _NAME.match(p.name):
            problems.append(f"{rel}: name has characters other than letters, digits, . _ -")
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            problems.append(f"{rel}: not a plain file or folder")
        elif p.is_file():
            if p.stat().st_size > MAX_FILE_BYTES:
                problems.append(f"{rel}: {p.stat().st_size} bytes (at most {MAX_FILE_BYTES})")
            if len(rel.parts) - 1 > MAX_DEPTH:
                problems.append(f"{rel}: {len(rel.parts) - 1} folders deep (at most {MAX_DEPTH})")
    return problems


def pack(dest: Path, folders: dict[str, Path], max_bytes: int = MAX_FILE_BYTES) -> list[str]:
    """Pack ``folders`` (arcname -> path) into the .tar.gz ``dest``. When it comes out over
    ``max_bytes``, the largest members are left out one by one until it fits; returns the
    left-out member names."""
    members: list[tuple[str, Path]] = []
    for arc, folder in folders.items():
        for p in sorted(folder.rglob("*")):
            if p.is_file() and not p.is_symlink():
                members.append((f"{arc}/{p.relative_to(folder)}", p))
    left_out: list[str] = []
    while True:
        with tarfile.open(dest, "w:gz") as tar:
            for arc, p in members:
                tar.add(p, arcname=arc)
        if dest.stat().st_size <= max_bytes or not members:
            return left_out
        biggest = max(members, key=lambda m: m[1].stat().st_size)
        members.remove(biggest)
        left_out.append(biggest[0])


def junit_counts(xml: Path) -> dict[str, int]:
    """tests/failures/errors/skipped summed over a JUnit XML file's test suites."""
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in keys}


def pytest_verdict(
    rc: int, counts: dict[str, int] | None, *, cuda: bool, timed_out: bool = False
) -> tuple[str, str]:
    """ok/failed and a detail for ``pytest -m gpu``. Without CUDA every gpu test skips (or none
    is collected, exit 5) and that is fine; on CUDA at least one must pass and none fail."""
    if timed_out:
        return "failed", "pytest -m gpu timed out"
    if counts is None:
        return "failed", f"pytest -m gpu exited {rc} without a report"
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    detail = (f"{passed} passed, {counts['skipped']} skipped, {counts['failures']} failed, "
              f"{counts['errors']} errors")
    if counts["failures"] or counts["errors"] or rc not in (0, 5):
        return "failed", f"pytest -m gpu exited {rc}: {detail}"
    if cuda and passed == 0:
        return "failed", f"no gpu test passed on CUDA ({detail})"
    if rc == 5 or counts["tests"] == 0:
        return "ok", "no gpu tests collected"
    return "ok", detail + ("" if cuda else " (no CUDA: gpu tests skip)")


def find_run_dir(root: Path) -> Path | None:
    """The run folder under ``root`` (the one holding summary.json), or None."""
    hits = sorted(root.rglob("summary.json"))
    return hits[0].parent if hits else None


def _arm_of(name: str) -> str:
    return {"a0": "atomic", "a1": "per_depth", "a2": "mixed", "a3": "wavefront"}.get(
        name.lower(), name.lower())


def _metric(row: dict[str, Any], key: str, stat: str | None) -> float | None:
    value = row.get(key)
    if stat is not None:
        value = value.get(stat) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def a2_a0_ratios(summary_path: Path) -> dict[str, float | None]:
    """A2/A0 of ITL p99 and output tok/s from summary.json's medians (first point)."""
    doc = json.loads(summary_path.read_text())
    rows = doc.get("medians") or doc.get("runs") or []
    point = min((r.get("point_id", 0) for r in rows), default=0)
    by_arm = {_arm_of(str(r.get("arm"))): r for r in rows if r.get("point_id", 0) == point}
    out: dict[str, float | None] = {"itl_p99": None, "output_tok_s": None}
    a0, a2 = by_arm.get("atomic"), by_arm.get("mixed")
    if a0 is None or a2 is None:
        return out
    for name, key, stat in (("itl_p99", "itl_ms", "p99"), ("output_tok_s", "output_tok_s", None)):
        num, den = _metric(a2, key, stat), _metric(a0, key, stat)
        out[name] = num / den if num is not None and den else None
    return out


def _fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "n/a" if value is None else format(value * scale, spec)


def _ratio(value: float | None, floor: float | None) -> str:
    return "n/a" if value is None or not floor else f"{value / floor:.2f}x"


def final_table(results: dict[str, Any]) -> str:
    """The short table printed last: stage status, the ceilings, core call times against the
    floor, and measured vs simulated A2/A0 ratios."""
    env = results.get("env") or {}
    dry = results.get("device") != "cuda"
    title = "gpu-check" + (" DRY RUN (cpu, tiny sizes: plumbing check, not GPU figures)"
                           if dry else f" on {env.get('gpu') or 'cuda'}")
    lines = [f"== {title}; commit {str(results.get('commit'))[:12]}, {results.get('date')} =="]
    lines.append(f"{'stage':<10} {'status':<8} {'time':>7}  detail")
    for st in results.get("stages", []):
        lines.append(f"{st['name']:<10} {st['status']:<8} {st['seconds']:>6.1f}s  "
                     f"{st['detail'][:90]}")
    ceil = results.get("ceilings") or {}
    copy, mm = ceil.get("copy") or {}, ceil.get("matmul") or {}
    lines.append(
        f"ceilings: copy {_fmt(copy.get('tb_per_s'), '.3f')} TB/s (read+write), "
        f"bf16 matmul {mm.get('n', '?')}^3 {_fmt(mm.get('tflop_per_s'), '.1f')} TFLOP/s"
        f"  [{ceil.get('timer', 'not measured')}]"
    )
    core = results.get("core") or {}
    floor = core.get("floor_s")
    lines.append(
        f"core call ({core.get('model', '?')} {core.get('dtype', '?')}): weight floor "
        f"{_fmt(floor, '.4f', 1e3)} ms = {_fmt(core.get('stack_bytes'), '.4g', 1e-9)} GB / "
        f"{_fmt(core.get('copy_bytes_per_s'), '.3f', 1e-12)} TB/s "
        f"({core.get('bandwidth_source', 'n/a')})"
    )
    lines.append(f"  {'rows':>6}  {'torch ms':>9} {'x floor':>8}  {'triton ms':>9} "
                 f"{'x floor':>8}  {'runner ms':>9} {'x floor':>8}  readbacks")
    model = {(r.get("backend", "torch"), r.get("label", str(r["rows"]))): r
             for r in core.get("model_core") or []}
    runner_rows = {str(r["rows"]): r for r in core.get("runner") or []}
    labels = list(dict.fromkeys([lab for _, lab in model] + list(runner_rows))) or [
        "1", "8", "32"]
    for lab in labels:
        t = (model.get(("torch", lab)) or {}).get("median_s")
        k = (model.get(("triton", lab)) or {}).get("median_s")
        run = runner_rows.get(lab) or {}
        r = run.get("median_s")
        lines.append(f"  {lab:>6}  {_fmt(t, '.3f', 1e3):>9} {_ratio(t, floor):>8}  "
                     f"{_fmt(k, '.3f', 1e3):>9} {_ratio(k, floor):>8}  "
                     f"{_fmt(r, '.3f', 1e3):>9} {_ratio(r, floor):>8}  "
                     f"{run.get('readbacks_per_step', '')}")
    kernel = results.get("kernel") or {}
    for sh in kernel.get("shapes") or []:
        lines.append(f"kernel {sh['kind']:<6} {sh['shape']:<20} triton/floor "
                     f"{sh['triton_over_floor']:.2f} triton/torch best "
                     f"{sh['triton_over_torch_best']:.2f} rel err {sh['errors']['triton_rel']:.1e}")
    for p in (results.get("divergence") or {}).get("pairs") or []:
        first, depth = p.get("first"), p.get("first_depth")
        lines.append(f"divergence {p['pair']:<20} {p['requests_differing']} differ; first "
                     + (f"output {first['output_index']} ({first['what']})" if first else "none")
                     + "; first depth " + (f"output {depth['output_index']}" if depth else "none"))
    ratios = results.get("ratios") or {}
    real, sim = ratios.get("measured") or {}, ratios.get("simulated") or {}
    label = "measured (cuda)" if not dry else "measured (cpu)"
    lines.append(f"A2/A0        {label:>16} {'simulated':>10}")
    for name, key in (("ITL p99", "itl_p99"), ("output tok/s", "output_tok_s")):
        lines.append(
            f"  {name:<12} {_fmt(real.get(key), '.3f'):>14} {_fmt(sim.get(key), '.3f'):>10}")
    lines += graph_lines(results)
    return "\n".join(lines)
