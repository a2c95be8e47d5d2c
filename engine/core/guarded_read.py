"""The one guarded reader of every file the project reads (scenarios, traces, ShareGPT files,
cost and exit profiles, prompts, checkpoint configs, run summaries): a regular file (never a
FIFO or a device, which would hang or never end), within a size bound, UTF-8 text (a
byte-order mark dropped), and for JSON parsed with nesting bounded. Every failure is one
``FileReadError`` line that names the file and the position (line and column) where there
is one.

It lives in ``engine.core`` because every layer reads files through it (the simulator reads
profiles, the engine checkpoint configs) and ``engine.core`` is the layer all may import.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 1 << 30  # 1 GiB: a ShareGPT dump is ~650 MB; past this, refuse before reading


class FileReadError(ValueError):
    """A file that cannot be read as asked: ``<path>[:<line>[:<column>]]: <reason>``."""

    def __init__(self, path: str | Path, reason: str, line: int | None = None,
                 column: int | None = None) -> None:
        self.path = str(path)
        self.reason = reason
        self.line = line
        self.column = column
        where = self.path + (f":{line}" if line is not None else "")
        where += f":{column}" if line is not None and column is not None else ""
        super().__init__(f"{where}: {reason}")


def check_regular(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> int:
    """The size of ``path`` after checking it is a regular file of at most ``max_bytes``
    (a FIFO, ``/dev/zero`` or a socket is refused before anything is read)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileReadError(path, "no such file") from None
    except OSError as err:
        raise FileReadError(path, f"cannot read ({err.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise FileReadError(path, "is a folder; give a file")
    if not stat.S_ISREG(st.st_mode):
        raise FileReadError(path, "is not a regular file (a FIFO, device or socket); "
                            "give a file")
    if st.st_size > max_bytes:
        raise FileReadError(path, f"{st.st_size} bytes is past the bound of {max_bytes} "
                            "bytes; give a smaller file")
    return st.st_size


def read_bytes(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``."""
    check_regular(path, max_bytes)
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as err:
        raise FileReadError(path, f"cannot read ({err.strerror})") from None
    if len(data) > max_bytes:  # grew while read
        raise FileReadError(path, f"past the bound of {max_bytes} bytes; give a smaller file")
    return data


def read_text(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> str:
    """UTF-8 text of a regular file (a leading byte-order mark dropped); a UTF-16 or other
    encoding is refused with the line and column of the first byte that is not UTF-8."""
    data = read_bytes(path, max_bytes)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise FileReadError(path, "is UTF-16 text (byte-order mark); save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise FileReadError(path, f"not UTF-8 text (byte {err.start}); save it as UTF-8",
                            line, column) from None


def parse_json(text: str, path: str | Path) -> Any:
    """``text`` (the contents of ``path``) parsed as JSON; nesting past the interpreter's
    recursion bound and non-finite numbers (NaN, Infinity: no JSON) are refused."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        raise FileReadError(path, f"not valid JSON ({err.msg})", err.lineno, err.colno) from None
    except _NonFinite as err:
        raise FileReadError(path, f"{err} is no JSON number; write a finite number") from None
    except RecursionError:
        raise FileReadError(path, "JSON nested too deep (past ~1000 levels); the file is "
                            "not one this project writes") from None


def read_json(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """A JSON file read with every guard (``read_text`` then ``parse_json``)."""
    return parse_json(read_text(path, max_bytes), path)


class _NonFinite(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _NonFinite(name)
