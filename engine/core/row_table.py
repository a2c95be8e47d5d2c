"""What the record tables (``engine.core.columns``) share: a table of distinct strings, the
row-sequence base class, and the pending columns' helpers.

A table records each step's and token's integer fields as one row of an unsigned 'I'
``array`` (one ``fromlist`` per row, whose values take CPython's fast path), its floats in
``Floats``: the public columns' typecodes ('i', 'b', 'q', 'd') parse every appended value
with ``PyArg_Parse``. Every ``FLUSH_ROWS`` rows, and before any read of a column, the
pending rows move into the public columns in bulk, field by field (``field_bytes``,
``field_byte``: strided copies, the same bytes for the 'i' columns as every recorded count,
code and id is non-negative). A public column therefore holds every row whenever it is
read, and the pending rows never hold more than ``FLUSH_ROWS``.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Iterator
from typing import Any, Final

# Final: compiled, a plain module constant is a dict lookup at every use.
FLUSH_ROWS: Final = 4096  # pending rows a table holds at most: a read moves no more
MAX_INT32: Final = 0x7FFFFFFF  # the largest value of an 'i' column
FLOAT_CHUNK: Final = 64  # floats gathered before ``Floats`` packs them into its column
_PACK_CHUNK: Final = struct.Struct(f"{FLOAT_CHUNK}d")
_LITTLE = sys.byteorder == "little"


class Strings:
    """Distinct strings in first-seen order; ``code`` gives each its index (``codes`` maps
    each value to it, for a hot loop that looks up before it calls ``code``)."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self.codes: dict[str, int] = {}

    def code(self, value: str) -> int:
        i = self.codes.get(value)
        if i is None:
            i = self.codes[value] = len(self.values)
            self.values.append(value)
        return i


def row_position(i: int, n: int) -> int:
    """Row ``i`` of ``n`` as a non-negative index (negative counts from the end)."""
    j = i + n if i < 0 else i
    if j < 0 or j >= n:
        raise IndexError("row index out of range")
    return j


class RowTable:
    """A sequence of rows held as columns: a subclass gives ``__len__`` and ``row``;
    indexing, slicing, iterating and comparing (with another table of its kind, or a list of
    rows) build rows on the fly."""

    def __len__(self) -> int:
        raise NotImplementedError

    def row(self, i: int) -> Any:
        raise NotImplementedError

    def append(self, r: Any) -> None:
        raise NotImplementedError

    def extend(self, rows: Iterable[Any]) -> None:
        for r in rows:
            self.append(r)

    def __getitem__(self, key: Any) -> Any:
        """A row, or a list of them for a slice."""
        if isinstance(key, slice):
            return [self.row(i) for i in range(*key.indices(len(self)))]
        return self.row(key)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self.row(i)

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self) or isinstance(other, list | tuple):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return repr(list(self))


class Floats:
    """A growing float64 column (``values``, an ``array("d")``) whose appended values gather
    in a fixed list and move over ``FLOAT_CHUNK`` at a time: ``struct`` packs a float
    without ``array``'s ``PyArg_Parse``. ``flush`` moves the rest, before ``values`` is read."""

    def __init__(self) -> None:
        self.values = array("d")
        self._chunk: list[float] = [0.0] * FLOAT_CHUNK
        self._num_pending = 0

    def add(self, value: float) -> None:
        n = self._num_pending
        self._chunk[n] = value
        n += 1
        if n == FLOAT_CHUNK:
            self.values.frombytes(_PACK_CHUNK.pack(*self._chunk))
            n = 0
        self._num_pending = n

    def flush(self) -> array[float]:
        """``values``, with every added value."""
        n = self._num_pending
        if n:
            self.values.frombytes(struct.pack(f"{n}d", *self._chunk[:n]))
            self._num_pending = 0
        return self.values

    def __len__(self) -> int:
        return len(self.values) + self._num_pending


def field_bytes(rows: array[int], field: int, width: int) -> memoryview:
    """Field ``field`` of every ``width``-field row of the 'I' array ``rows``, as the bytes
    of an 'i' column (``array.frombytes`` takes them)."""
    return memoryview(rows[field::width]).cast("B")


def wide_field_bytes(rows: array[int], field: int, width: int) -> bytes:
    """Fields ``field`` (the low 32 bits) and ``field + 1`` (the high) of every row, joined
    into the bytes of a 'q' column."""
    words = array("I", bytes(8 * (len(rows) // width)))
    low = 0 if _LITTLE else 1
    view = memoryview(words)
    view[low::2] = memoryview(rows)[field::width]
    view[1 - low::2] = memoryview(rows)[field + 1::width]
    return words.tobytes()


def field_byte(rows: array[int], field: int, width: int, byte: int = 0) -> bytes:
    """Byte ``byte`` (0: the lowest) of field ``field`` of every row, one byte a row."""
    offset = 4 * field + (byte if _LITTLE else 3 - byte)
    return memoryview(rows).cast("B")[offset::4 * width].tobytes()


def byte_code(code: int) -> int:
    """``code`` checked for a signed-byte column: the range error appending it raises."""
    if code > 127:
        raise OverflowError("signed char is greater than maximum")
    return code
