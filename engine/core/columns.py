"""A run's step and token rows held as columns: one growing typed ``array`` per field, the
strings (stage, kind, depths, request ids, finish reasons) as small-int codes into a table of
the distinct values. A 100k-request run holds tens of millions of tokens; as columns each
costs about 24 bytes instead of a ~200-byte object graph.

Both tables are sequences of their row type (``StepRecord``, ``TokenEvent``): indexing and
iterating build rows on the fly, so code that reads rows one by one is unchanged; bulk
readers (metrics, output writers) take the columns themselves.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import Any

from engine.core.batch import Batch
from engine.core.results import (
    STEP_KIND_STAGES,
    STEP_KINDS,
    StepRecord,
    TokenEvent,
    max_prompt_items_per_request,
    rfc_readbacks,
    step_kind_index,
)


class Strings:
    """Distinct strings in first-seen order; ``code`` gives each its index."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._index: dict[str, int] = {}

    def code(self, value: str) -> int:
        i = self._index.get(value)
        if i is None:
            i = self._index[value] = len(self.values)
            self.values.append(value)
        return i


def _pos(i: int, n: int) -> int:
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


class StepTable(RowTable):
    """steps.csv's rows (``StepRecord``) as columns."""

    def __init__(self) -> None:
        self.step = array("q")
        self.start_s = array("d")
        self.end_s = array("d")
        self.stage = array("b")  # codes into self.strings
        self.kind = array("b")
        self.core_calls = array("i")
        self.num_decode_items = array("i")
        self.num_prompt_items = array("i")
        self.num_prompt_tokens = array("i")
        self.num_fused_prelude_items = array("i")
        self.depths = array("i")
        self.mixed = array("b")
        self.num_readbacks = array("i")
        self.max_prompt_items_per_request = array("i")
        self.strings = Strings()
        # Per step kind (``STEP_KINDS``' order), its stage's and its own code; -1 until seen.
        self._stage_codes = [-1] * len(STEP_KINDS)
        self._kind_codes = [-1] * len(STEP_KINDS)

    @staticmethod
    def of(rows: Iterable[StepRecord]) -> StepTable:
        table = StepTable()
        table.extend(rows)
        return table

    def append(self, r: StepRecord) -> None:
        self._add(r.step, r.start_s, r.end_s, r.stage, r.kind, r.core_calls, r.num_decode_items,
                  r.num_prompt_items, r.num_prompt_tokens, r.num_fused_prelude_items, r.depths,
                  r.mixed, r.num_readbacks, r.max_prompt_items_per_request)

    def add_batch(self, batch: Batch, start_s: float, end_s: float, depths: str,
                  num_readbacks: int | None = None) -> None:
        """The row ``StepRecord.from_batch(batch, start_s, end_s, depths, num_readbacks)``
        would give; the stage and kind codes are looked up once per step kind."""
        kind = step_kind_index(batch)
        kind_code = self._kind_codes[kind]
        if kind_code < 0:  # first seen: code the stage, then the kind, as ``_add`` does
            self._stage_codes[kind] = self.strings.code(STEP_KIND_STAGES[kind])
            kind_code = self._kind_codes[kind] = self.strings.code(STEP_KINDS[kind])
        self.step.append(batch.step)
        self.start_s.append(start_s)
        self.end_s.append(end_s)
        self.stage.append(self._stage_codes[kind])
        self.kind.append(kind_code)
        self.core_calls.append(batch.num_core_calls)
        self.num_decode_items.append(batch.num_decode_items)
        self.num_prompt_items.append(batch.num_prompt_items)
        self.num_prompt_tokens.append(batch.num_prompt_tokens)
        self.num_fused_prelude_items.append(batch.num_fused_prelude_items)
        self.depths.append(self.strings.code(depths))
        self.mixed.append(1 if kind == 3 else 0)
        self.num_readbacks.append(
            rfc_readbacks(batch) if num_readbacks is None else num_readbacks)
        self.max_prompt_items_per_request.append(max_prompt_items_per_request(batch))

    def _add(self, step: int, start_s: float, end_s: float, stage: str, kind: str,
             core_calls: int, num_decode_items: int, num_prompt_items: int,
             num_prompt_tokens: int, num_fused_prelude_items: int, depths: str,
             mixed: bool, num_readbacks: int, max_prompt_items_per_request: int) -> None:
        codes = self.strings
        self.step.append(step)
        self.start_s.append(start_s)
        self.end_s.append(end_s)
        self.stage.append(codes.code(stage))
        self.kind.append(codes.code(kind))
        self.core_calls.append(core_calls)
        self.num_decode_items.append(num_decode_items)
        self.num_prompt_items.append(num_prompt_items)
        self.num_prompt_tokens.append(num_prompt_tokens)
        self.num_fused_prelude_items.append(num_fused_prelude_items)
        self.depths.append(codes.code(depths))
        self.mixed.append(1 if mixed else 0)
        self.num_readbacks.append(num_readbacks)
        self.max_prompt_items_per_request.append(max_prompt_items_per_request)

    def __len__(self) -> int:
        return len(self.step)

    def row(self, i: int) -> StepRecord:
        """Row ``i`` (negative counts from the end) as a ``StepRecord``."""
        i = _pos(i, len(self.step))
        s = self.strings.values
        return StepRecord(
            self.step[i], self.start_s[i], self.end_s[i], s[self.stage[i]], s[self.kind[i]],
            self.core_calls[i], self.num_decode_items[i], self.num_prompt_items[i],
            self.num_prompt_tokens[i], self.num_fused_prelude_items[i], s[self.depths[i]],
            bool(self.mixed[i]), self.num_readbacks[i], self.max_prompt_items_per_request[i],
        )


class TokenTable(RowTable):
    """tokens.csv's rows (``TokenEvent``) as columns; ``request`` holds codes into
    ``request_ids`` and ``finish_reason`` codes into ``reasons`` (-1: None)."""

    def __init__(self) -> None:
        self.request = array("i")
        self.index = array("i")
        self.time_s = array("d")
        self.token_id = array("i")
        self.exit_depth = array("b")
        self.finished = array("b")
        self.finish_reason = array("b")
        self.request_ids = Strings()
        self.reasons = Strings()

    @staticmethod
    def of(events: Iterable[TokenEvent]) -> TokenTable:
        table = TokenTable()
        table.extend(events)
        return table

    def append(self, e: TokenEvent) -> None:
        self.request.append(self.request_ids.code(e.request_id))
        self.index.append(e.index)
        self.time_s.append(e.time_s)
        self.token_id.append(e.token_id)
        self.exit_depth.append(e.exit_depth)
        self.finished.append(1 if e.finished else 0)
        reason = e.finish_reason
        self.finish_reason.append(-1 if reason is None else self.reasons.code(reason))

    def extend(self, rows: Iterable[TokenEvent]) -> None:
        """``append`` for each row (a step's events): the columns read once per call."""
        request, index, time_s = self.request, self.index, self.time_s
        token_id, exit_depth, finished = self.token_id, self.exit_depth, self.finished
        finish_reason, request_ids = self.finish_reason, self.request_ids
        for e in rows:
            request.append(request_ids.code(e.request_id))
            index.append(e.index)
            time_s.append(e.time_s)
            token_id.append(e.token_id)
            exit_depth.append(e.exit_depth)
            finished.append(1 if e.finished else 0)
            reason = e.finish_reason
            finish_reason.append(-1 if reason is None else self.reasons.code(reason))

    def __len__(self) -> int:
        return len(self.index)

    def previous(self) -> array[int]:
        """Per row, the row of the same request's previous token (-1 for its first);
        ValueError when a request's tokens are out of order."""
        last = array("q", [-1]) * len(self.request_ids.values)
        prev = array("q", [-1]) * len(self.index)
        request, index = self.request, self.index
        for k in range(len(index)):
            r = request[k]
            j = last[r]
            if j >= 0:
                if index[k] != index[j] + 1:
                    raise ValueError(
                        f"tokens of {self.request_ids.values[r]} out of order: index "
                        f"{index[k]} after {index[j]}")
                prev[k] = j
            last[r] = k
        return prev

    def gaps(self) -> array[float]:
        """Every gap (s) between consecutive tokens of one request, in the order the later
        token came (``previous``'s ValueError when out of order)."""
        prev, time_s = self.previous(), self.time_s
        out = array("d")
        for k in range(len(prev)):
            j = prev[k]
            if j >= 0:
                out.append(time_s[k] - time_s[j])
        return out

    def row(self, i: int) -> TokenEvent:
        """Row ``i`` (negative counts from the end) as a ``TokenEvent``."""
        i = _pos(i, len(self.index))
        code = self.finish_reason[i]
        return TokenEvent(
            self.request_ids.values[self.request[i]], self.index[i], self.time_s[i],
            self.token_id[i], self.exit_depth[i], bool(self.finished[i]),
            None if code < 0 else self.reasons.values[code],
        )
