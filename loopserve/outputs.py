"""Run output files (DESIGN.md §11), written into a staging folder renamed when complete.

CSV columns are fixed here. ``steps.csv`` carries the step's ``kind`` (decode | prompt |
mixed | prefill | prelude | coda) beside ``stage``, which the timeline colours by. Floats are
written with Python's shortest round-trip repr, so the same run gives the same bytes.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from loopserve.orchestrate import RunResult
from loopserve.schema.scenario import Scenario

RUN_KEY_COLUMNS = ("arm", "point_id", "repeat")
STEPS_COLUMNS = RUN_KEY_COLUMNS + (
    "step", "start_s", "end_s", "stage", "kind", "core_calls", "num_decode_items",
    "num_prompt_items", "num_prompt_tokens", "num_fused_prelude_items", "depths", "mixed",
)
REQUESTS_COLUMNS = RUN_KEY_COLUMNS + (
    "request_id", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s", "finish_s",
    "injected", "finish_reason",
)
TOKENS_COLUMNS = RUN_KEY_COLUMNS + (
    "request_id", "index", "time_s", "token_id", "exit_depth",
)


def new_run_id(target: str, parent: Path) -> str:
    """``YYYYMMDD-HHMMSS-<target>``, suffixed ``-2``, ``-3``... when taken."""
    base = f"{time.strftime('%Y%m%d-%H%M%S')}-{target}"
    run_id, n = base, 1
    while (parent / run_id).exists():
        n += 1
        run_id = f"{base}-{n}"
    return run_id


def run_destination(out: str | None, parent: Path, label: str) -> Path:
    """The run folder: ``--out`` when given (it must not exist or be an empty folder), else a
    new ``parent/<run-id>`` labelled ``label``."""
    from loopserve.errors import UserError

    if out is not None:
        dest = Path(out)
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise UserError("--out", f"{dest} exists and is not an empty folder; pick a new one")
        return dest
    return parent / new_run_id(label, parent)


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file beside it, renamed when complete (the
    file gets the mode a plain create would give it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def staged_dir(dest: Path) -> Iterator[Path]:
    """Yield a temp folder beside ``dest``; rename it to ``dest`` on success, delete it (and
    any parent folder this call created) on failure."""
    created: list[Path] = []
    parent = dest.parent
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    for folder in reversed(created):
        folder.mkdir()
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)
        if dest.is_dir() and not any(dest.iterdir()):
            dest.rmdir()
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for folder in created:
            if folder.exists() and not any(folder.iterdir()):
                folder.rmdir()
        raise


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n")


def write_scenario(path: Path, scn: Scenario) -> None:
    """The resolved scenario (after --set), loadable again with ``loopserve run``."""
    data = scn.model_dump(mode="json", exclude_none=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def write_records(folder: Path, results: Sequence[RunResult]) -> None:
    """steps.csv, requests.csv and tokens.csv, runs in execution order."""
    write_csv(folder / "steps.csv", STEPS_COLUMNS, (
        (r.spec.arm, r.spec.point_id, r.spec.repeat, s.step, s.start_s, s.end_s, s.stage,
         s.kind, s.core_calls, s.num_decode_items, s.num_prompt_items, s.num_prompt_tokens,
         s.num_fused_prelude_items, s.depths, s.mixed)
        for r in results for s in r.records.steps
    ))
    write_csv(folder / "requests.csv", REQUESTS_COLUMNS, (
        (r.spec.arm, r.spec.point_id, r.spec.repeat, q.request_id, q.arrival_s,
         q.prompt_tokens, q.output_tokens, _opt(q.first_token_s), _opt(q.finish_s),
         q.injected, _opt(q.finish_reason))
        for r in results for q in sorted(r.records.requests, key=lambda q: q.arrival_s)
    ))
    write_csv(folder / "tokens.csv", TOKENS_COLUMNS, (
        (r.spec.arm, r.spec.point_id, r.spec.repeat, t.request_id, t.index, t.time_s,
         t.token_id, t.exit_depth)
        for r in results for t in r.records.tokens
    ))


def _opt(value: Any) -> Any:
    return "" if value is None else value
