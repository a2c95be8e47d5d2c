"""Run records across processes: ``pickle`` support for the compiled record classes.

Compiled, some record classes of ``engine.core`` do not pickle as they are
(``engine/_native.py``, requirement 3). ``register``, which whatever pickles records calls
first (the Ray tasks), adds ``copyreg`` reducers for ``StepRecord``, ``TokenEvent``,
``RequestRecord``, ``PrefixCacheStats`` and ``RunRecords``: a record rebuilds from its fields
in order, and ``RunRecords`` travels as its constructor's fields, a list of records as one
tuple of field values per row (pickled faster than one reduced object per row; tables already
held as columns pickle as they are). Ray's serializer (cloudpickle) reads ``copyreg``'s
table, so a Ray task can return a run's records.
"""

from __future__ import annotations

import copyreg
import dataclasses
from itertools import starmap
from operator import attrgetter
from typing import Any, NamedTuple

from engine.core.prefix_cache import PrefixCacheStats
from engine.core.records import RequestRecord, RunRecords
from engine.core.results import StepRecord, TokenEvent

ROW_TYPES: tuple[type, ...] = (StepRecord, TokenEvent, RequestRecord, PrefixCacheStats)
# RunRecords' constructor keywords (it is rebuilt from them; a table of columns that pickles
# by itself travels as it is)
RECORD_FIELDS = ("steps", "tokens", "requests", "batches", "wall_s", "invalid_reasons",
                 "prefix_cache")


class Rows(NamedTuple):
    """A list of records as its class and one tuple of field values per row."""

    cls: type
    rows: list[tuple[Any, ...]]

    def build(self) -> list[Any]:
        return list(starmap(self.cls, self.rows))


def field_names(cls: type) -> tuple[str, ...]:
    """The dataclass fields of ``cls`` in order (its constructor takes them in this order)."""
    return tuple(f.name for f in dataclasses.fields(cls))


def row_values(obj: Any) -> tuple[Any, ...]:
    """A record's field values in order (what it is rebuilt from)."""
    return tuple(getattr(obj, n) for n in field_names(type(obj)))


def _reduce_row(obj: Any) -> tuple[type, tuple[Any, ...]]:
    return type(obj), row_values(obj)


def _as_rows(value: Any) -> Any:
    if isinstance(value, list) and value and type(value[0]) in ROW_TYPES:
        cls = type(value[0])
        names = field_names(cls)
        get = attrgetter(*names)
        rows = [get(r) for r in value] if len(names) > 1 else [(get(r),) for r in value]
        return Rows(cls, rows)
    return value


def _reduce_records(rec: RunRecords) -> tuple[Any, tuple[dict[str, Any], Any]]:
    return rebuild_records, ({n: _as_rows(getattr(rec, n)) for n in RECORD_FIELDS},
                             rec.cluster)


def rebuild_records(state: dict[str, Any], cluster: Any = None) -> RunRecords:
    """The ``RunRecords`` that ``_reduce_records`` took apart (with a simulated cluster's
    part, a plain picklable object)."""
    rec = RunRecords(**{k: v.build() if isinstance(v, Rows) else v for k, v in state.items()})
    rec.cluster = cluster
    return rec


def register() -> None:
    """Make the record classes picklable (idempotent)."""
    for cls in ROW_TYPES:
        copyreg.pickle(cls, _reduce_row)
    copyreg.pickle(RunRecords, _reduce_records)
