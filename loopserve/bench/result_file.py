"""The result JSON of ``loopserve bench serve`` as ``vllm bench serve --save-result`` writes it.

Keys in vLLM's order: ``date``, ``endpoint_type``, ``backend``, ``label``, ``model_id``,
``tokenizer_id``, ``num_prompts``, the ``--metadata`` pairs, ``request_rate``, ``burstiness``,
``max_concurrency``, the ``ramp_up_*`` keys under a ramp-up, then the benchmark's keys
(``loopserve.outputs.vllm_results``) and ``rps_change_events`` under a ramp-up. Without
``--save-detailed`` the per-request lists are dropped, as vLLM drops them; with it they stay,
with ``start_times`` (each request's send time, s from the benchmark's start) beside them.
loopserve adds ``base_urls`` and ``num_warmups``.

The destination is decided and checked before any request (``destination``): ``--result-file
PATH``, or ``--result-dir`` / ``--result-filename`` (the file name defaulting to vLLM's
``{label}-{rate}qps[-concurrency{C}]-{model}-{date}.json``). A folder where the file is
meant, or a folder that cannot be written, is a one-line error naming the flag. An existing
file is replaced, as vLLM replaces it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loopserve.errors import UserError
from loopserve.outputs.files import check_writable

PER_REQUEST_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")


def parse_metadata(items: Sequence[str], reserved: set[str]) -> dict[str, str]:
    """``["version=0.3", "tp=1"]`` -> ``{"version": "0.3", "tp": "1"}``; UserError naming
    ``--metadata`` on an item without ``=``, an empty or repeated key, or a key the result
    already has."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError("--metadata", f"{item!r} must be KEY=VALUE")
        if key in out:
            raise UserError("--metadata", f"key {key!r} is given twice")
        if key in reserved:
            raise UserError("--metadata", f"key {key!r} is a result key; pick another name")
        out[key] = value.strip()
    return out


def default_filename(label: str, model_id: str, date: str, request_rate: float,
                     max_concurrency: int | None, ramp_up: tuple[str, float, float] | None
                     ) -> str:
    """vLLM's result file name."""
    conc = f"-concurrency{max_concurrency}" if max_concurrency is not None else ""
    model = model_id.split("/")[-1]
    if ramp_up is not None:
        strategy, start, end = ramp_up
        return (f"{label}-ramp-up-{strategy}-{start:g}qps-{end:g}qps{conc}-{model}-"
                f"{date}.json")
    return f"{label}-{request_rate}qps{conc}-{model}-{date}.json"


def destination(result_file: str | None, result_dir: str | None,
                result_filename: str | None, default_name: str) -> Path:
    """Where the result goes, checked writable (module docstring)."""
    if result_file is not None:
        if result_dir is not None or result_filename is not None:
            raise UserError("--result-file", "give either --result-file or --result-dir / "
                            "--result-filename, not both")
        path, flag = Path(result_file), "--result-file"
    else:
        if result_filename is not None and (not result_filename.strip()
                                            or Path(result_filename).name != result_filename):
            raise UserError("--result-filename", f"{result_filename!r} must be a file name; "
                            "put the folder in --result-dir")
        folder = Path(result_dir) if result_dir is not None else Path.cwd()
        if folder.exists() and not folder.is_dir():
            raise UserError("--result-dir", f"{folder} is a file, not a folder")
        path = folder / (result_filename or default_name)
        flag = "--result-filename" if result_filename else "--result-dir"
    if path.is_dir():
        raise UserError(flag, f"{path} is a folder; give a file path")
    check_writable(path.parent if path.exists() else path, flag)
    return path


def result_document(head: dict[str, Any], metadata: dict[str, str], traffic: dict[str, Any],
                    bench: dict[str, Any], start_times: Sequence[float],
                    save_detailed: bool) -> dict[str, Any]:
    """The whole result in vLLM's key order (module docstring)."""
    doc = {**head, **metadata, **traffic, **bench}
    if save_detailed:
        doc["start_times"] = list(start_times)
    else:
        for key in PER_REQUEST_KEYS:
            doc.pop(key, None)
    return doc
