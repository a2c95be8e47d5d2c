"""One table file of a run folder, Parquet (zstd) or CSV, written from columns and read back
into a DataFrame that is the same whichever format it came from.

A table is written as a list of column sets (one per run, in execution order), each column a
numpy array or ``Codes`` (small-int codes into a list of strings, None for a missing value).
Parquet files are byte-identical for identical rows: no timestamps, fixed row groups, fixed
encodings and a fixed schema (its metadata names the table). CSV writes floats with Python's
shortest round-trip repr and a missing value as an empty field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from loopserve.outputs.files import write_csv

FORMATS = ("parquet", "csv")
ROW_GROUP_ROWS = 1 << 20
_CSV_CHUNK_ROWS = 1 << 16
_TEXT = pa.dictionary(pa.int32(), pa.string())
# Parquet's plain float encoding compresses timestamps poorly; split into byte streams they
# shrink by a fifth. Step counters are deltas of one.
_FLOAT_ENCODING = "BYTE_STREAM_SPLIT"
_COUNTER_ENCODING = "DELTA_BINARY_PACKED"


@dataclass(frozen=True)
class Codes:
    """A string column: ``values[codes[i]]`` is row i's value (None: missing)."""

    codes: np.ndarray
    values: Sequence[str | None]

    @staticmethod
    def constant(value: str, n: int) -> Codes:
        return Codes(np.zeros(n, dtype=np.int32), [value])


Columns = Mapping[str, "np.ndarray | Codes"]
# a table's columns in order, each "text", "int", "float", "bool" or "counter" (int, delta coded)
Schema = Sequence[tuple[str, str]]


def table_path(folder: Path, name: str, fmt: str) -> Path:
    return folder / f"{name}.{fmt}"


def write_table(folder: Path, name: str, fmt: str, schema: Schema,
                parts: Sequence[Columns]) -> Path:
    """Write ``parts`` (each a run's columns) as ``folder/name.fmt``; returns the path."""
    path = table_path(folder, name, fmt)
    if fmt == "csv":
        _write_csv(path, schema, parts)
    else:
        _write_parquet(path, name, schema, parts)
    return path


def _arrow_type(kind: str) -> Any:
    return {"text": _TEXT, "int": pa.int64(), "counter": pa.int64(), "float": pa.float64(),
            "bool": pa.bool_()}[kind]


def _arrow(col: np.ndarray | Codes, kind: str) -> Any:
    if isinstance(col, Codes):
        missing = [i for i, v in enumerate(col.values) if v is None]
        values = pa.array(["" if v is None else v for v in col.values], type=pa.string())
        mask = np.isin(col.codes, missing) if missing else None
        indices = pa.array(np.asarray(col.codes, dtype=np.int32), mask=mask)
        return pa.DictionaryArray.from_arrays(indices, values)
    if kind in ("int", "counter"):  # the column's own width (no copy); read back as int64
        return pa.array(col)
    return pa.array(col).cast(_arrow_type(kind))


def _write_parquet(path: Path, name: str, schema: Schema, parts: Sequence[Columns]) -> None:
    columns = [[_arrow(p[c], k) for c, k in schema] for p in parts]
    types = [a.type for a in columns[0]] if columns else [_arrow_type(k) for _, k in schema]
    arrow_schema = pa.schema([(c, t) for (c, _), t in zip(schema, types, strict=True)],
                             metadata={"loopserve.table": name})
    tables = [pa.Table.from_arrays(cols, schema=arrow_schema) for cols in columns]
    table = pa.concat_tables(tables).unify_dictionaries() if tables else \
        arrow_schema.empty_table()
    plain = [c for c, k in schema if k in ("float", "counter")]
    pq.write_table(
        table, path, row_group_size=ROW_GROUP_ROWS, compression="zstd", compression_level=3,
        use_dictionary=[c for c, _ in schema if c not in plain],
        column_encoding={c: _FLOAT_ENCODING if k == "float" else _COUNTER_ENCODING
                         for c, k in schema if c in plain},
        write_statistics=True, store_schema=True)


def _write_csv(path: Path, schema: Schema, parts: Sequence[Columns]) -> None:
    write_csv(path, [c for c, _ in schema], _csv_rows(schema, parts))


def _csv_rows(schema: Schema, parts: Sequence[Columns]) -> Iterator[tuple[Any, ...]]:
    for part in parts:
        n = _num_rows(part, schema)
        for lo in range(0, n, _CSV_CHUNK_ROWS):
            hi = min(n, lo + _CSV_CHUNK_ROWS)
            cols = [_python(part[c], k, lo, hi) for c, k in schema]
            yield from zip(*cols, strict=True)


def _num_rows(part: Columns, schema: Schema) -> int:
    col = part[schema[0][0]]
    return len(col.codes if isinstance(col, Codes) else col)


def _python(col: np.ndarray | Codes, kind: str, lo: int, hi: int) -> list[Any]:
    if isinstance(col, Codes):
        values = ["" if v is None else v for v in col.values]
        return [values[i] for i in col.codes[lo:hi].tolist()]
    if kind == "bool":
        return np.asarray(col[lo:hi], dtype=bool).tolist()
    if kind == "float":  # NaN marks a missing value: an empty field, as before
        return ["" if v != v else v for v in np.asarray(col[lo:hi], dtype=np.float64).tolist()]
    return np.asarray(col[lo:hi], dtype=np.int64).tolist()


def find_table(folder: Path, name: str) -> Path | None:
    """``name.parquet`` or ``name.csv`` in ``folder`` (Parquet first), or None."""
    for fmt in FORMATS:
        path = table_path(folder, name, fmt)
        if path.is_file():
            return path
    return None


def read_table(path: Path, columns: Sequence[str] | None = None,
               where: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """A table file as a DataFrame: text as str, integers as int64, a missing value NaN;
    the same frame from either format. ``columns`` limits the columns read, ``where``
    ({column: value}) the rows (Parquet filters them while reading, so a large table is
    never held whole)."""
    cols = list(columns) if columns is not None else None
    if path.suffix == ".csv":
        read = None if cols is None else list(dict.fromkeys([*cols, *(where or {})]))
        df = pd.read_csv(path, keep_default_na=False, na_values=[""], usecols=read)
        for name, value in (where or {}).items():
            df = df[df[name] == value]
        df = df if cols is None else df[cols]
        return df.reset_index(drop=True) if where else df
    table = _read_parquet(path, cols, where) if where else pq.read_table(path, columns=cols)
    fields = [pa.field(f.name, pa.string()) if pa.types.is_dictionary(f.type)
              else pa.field(f.name, pa.int64()) if pa.types.is_integer(f.type) else f
              for f in table.schema]
    return table.cast(pa.schema(fields)).to_pandas()


def _read_parquet(path: Path, columns: list[str] | None, where: Mapping[str, Any]) -> pa.Table:
    """The rows of ``path`` matching ``where``, one row group at a time (a row group whose
    statistics rule a value out is not read); ``columns`` in their order (all when None)."""
    file = pq.ParquetFile(path)
    names = columns if columns is not None else file.schema_arrow.names
    read = list(dict.fromkeys([*names, *where]))
    parts = []
    for i in range(file.num_row_groups):
        if not _may_match(file.metadata.row_group(i), where):
            continue
        group = file.read_row_group(i, columns=read)
        mask = None
        for name, value in where.items():
            column = group[name]
            if pa.types.is_dictionary(column.type):
                column = column.cast(column.type.value_type)
            equal = pc.equal(column, value)
            mask = equal if mask is None else pc.and_(mask, equal)
        parts.append(group.filter(mask))
    if not parts:
        return file.schema_arrow.empty_table().select(names)
    return pa.concat_tables(parts).select(names)


def _may_match(group: Any, where: Mapping[str, Any]) -> bool:
    """False when a row group's min/max statistics exclude a ``where`` number."""
    for k in range(group.num_columns):
        chunk = group.column(k)
        value = where.get(chunk.path_in_schema)
        stats = chunk.statistics
        if (isinstance(value, int) and stats is not None and stats.has_min_max
                and isinstance(stats.min, int) and not stats.min <= value <= stats.max):
            return False
    return True
