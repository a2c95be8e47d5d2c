"""The one reader of the simulator's versioned JSON files (cost profiles, exit profiles):
read, parse, check the ``format`` tag, validate with the file's pydantic model, and turn
every failure into one ``ValueError`` line that names the file and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from engine.core.guarded_read import FileReadError, parse_json, read_text

M = TypeVar("M", bound=BaseModel)


def validation_line(err: ValidationError) -> str:
    """The first validation error as ``loc: message`` (+N more when there are others)."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "<root>"
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{loc}: {first['msg']}{more}"


def read_versioned(source: str | Path | dict[str, Any], model: type[M], *, fmt: str,
                   where: str, what: str, fix: str) -> M:
    """``source`` (a path, or already-parsed data) validated as ``model`` with format tag
    ``fmt``. ValueError("<where>[: PATH]: reason"): unreadable, not JSON (``fix`` says what
    to re-run), another format, or invalid as ``what``."""
    if isinstance(source, dict):
        data: Any = source
    else:
        where = f"{where}: {source}"
        try:
            text = read_text(source)
        except FileReadError as exc:
            raise ValueError(f"{where}: cannot read the file ({exc.reason})") from None
        try:
            data = parse_json(text, source)
        except FileReadError as exc:
            reason = exc.reason
            if exc.line is not None and reason.startswith("not valid JSON ("):
                reason = (f"not valid JSON (line {exc.line}, column {exc.column}: "
                          f"{reason.removeprefix('not valid JSON (')}")
            raise ValueError(
                f"{where}: {reason}; the file is corrupt or truncated, {fix}"
            ) from None
    if not isinstance(data, dict) or data.get("format") != fmt:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{where}: format is {found!r}, expected {fmt!r}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{where}: invalid {what}: {validation_line(exc)}") from None
