"""A run's step and token rows held as columns: one growing typed ``array`` per field, the
strings (stage, kind, depths, request ids, finish reasons) as small-int codes into a table of
the distinct values. A 100k-request run holds tens of millions of tokens; as columns each
costs about 24 bytes instead of a ~200-byte object graph.

Both tables are sequences of their row type (``StepRecord``, ``TokenEvent``): indexing and
iterating build rows on the fly, so code that reads rows one by one is unchanged; bulk
readers (metrics, output writers) take the columns themselves. Rows are recorded into pending
columns first (``engine.core.row_table``); reading a column moves them in.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Final

from engine.core.batch import Batch
from engine.core.results import (
    STEP_KIND_STAGES,
    STEP_KINDS,
    StepRecord,
    depths_text,
    max_prompt_items_per_request,
    rfc_readbacks,
    step_kind_index,
)
from engine.core.row_table import (
    FLUSH_ROWS,
    MAX_INT32,
    Floats,
    RowTable,
    Strings,
    byte_code,
    field_byte,
    field_bytes,
    row_position,
    wide_field_bytes,
)
from engine.core.token_table import TokenTable

__all__ = ["RowTable", "StepTable", "Strings", "TokenTable"]

# Fields of a pending row: the step's low and high 32 bits, the kind, core_calls ..
# max_prompt_items_per_request.
_ROW: Final = 11
_MIXED = bytes(1 if k == STEP_KINDS.index("mixed") else 0 for k in range(256))


def _translation(codes: list[int]) -> bytes:
    """A ``bytes.translate`` table mapping step kind index ``k`` to ``codes[k]``."""
    return bytes(max(c, 0) for c in codes) + bytes(256 - len(codes))


class StepTable(RowTable):
    """steps.csv's rows (``StepRecord``) as columns: ``step`` .. ``max_prompt_items_per_request``
    (public ``array`` columns, ``stage``, ``kind`` and ``depths`` coding into ``strings``)."""

    def __init__(self) -> None:
        self.strings = Strings()
        self._step = array("q")
        self._start_s = Floats()
        self._end_s = Floats()
        self._stage = array("b")  # codes into self.strings
        self._kind = array("b")
        self._core_calls = array("i")
        self._num_decode_items = array("i")
        self._num_prompt_items = array("i")
        self._num_prompt_tokens = array("i")
        self._num_fused_prelude_items = array("i")
        self._depths = array("i")
        self._mixed = array("b")
        self._num_readbacks = array("i")
        self._max_prompt_items_per_request = array("i")
        # Rows from add_batch not yet in the columns above (engine.core.row_table), _ROW
        # fields each; the kind as its index in STEP_KINDS, which gives the stage, kind
        # and mixed columns.
        self._p_rows = array("I")
        # Per step kind (``STEP_KINDS``' order), its stage's and its own code; -1 until seen.
        self._stage_codes = [-1] * len(STEP_KINDS)
        self._kind_codes = [-1] * len(STEP_KINDS)
        # The depths code by item count per depth, counted into one list kept between steps.
        self._depth_codes: dict[tuple[int, ...], int] = {}
        self._counts: list[int] = []
        self._no_depths = -1  # the code of "", once seen

    @staticmethod
    def of(rows: Iterable[StepRecord]) -> StepTable:
        table = StepTable()
        table.extend(rows)
        return table

    def add_batch(self, batch: Batch, start_s: float, end_s: float,
                  num_readbacks: int | None = None) -> None:
        """Append ``StepRecord.from_batch(batch, start_s, end_s, None, num_readbacks)``'s
        row, its strings coded in the order ``append`` codes them (stage, kind, depths)."""
        kind = step_kind_index(batch)
        if self._kind_codes[kind] < 0:  # first seen: code the stage, then the kind
            self._stage_codes[kind] = byte_code(self.strings.code(STEP_KIND_STAGES[kind]))
            self._kind_codes[kind] = byte_code(self.strings.code(STEP_KINDS[kind]))
        depths = self._depths_code(batch)
        step = batch.step
        readbacks = rfc_readbacks(batch) if num_readbacks is None else num_readbacks
        most = max_prompt_items_per_request(batch)
        # The 'i' and 'q' columns take the pending fields' bytes as they are: a value past
        # their range is refused here, as their own append would (a negative count by
        # ``fromlist``, which then adds nothing), before any column of the row grows.
        if (batch.num_core_calls | batch.num_decode_items | batch.num_prompt_items
                | batch.num_prompt_tokens | batch.num_fused_prelude_items | readbacks
                | most) > MAX_INT32 or step >> 63:
            raise OverflowError(f"step {step}: a value exceeds the step table's columns")
        self._p_rows.fromlist([  # one resize, no iterator: cheaper than extend
            step & 0xFFFFFFFF, step >> 32, kind, batch.num_core_calls,
            batch.num_decode_items, batch.num_prompt_items, batch.num_prompt_tokens,
            batch.num_fused_prelude_items, depths, readbacks, most,
        ])
        self._start_s.add(start_s)
        self._end_s.add(end_s)
        if len(self._p_rows) >= FLUSH_ROWS * _ROW:
            self._flush()

    def _depths_code(self, batch: Batch) -> int:
        """The code of ``depths_text(batch.depth_counts())``, "" for a step without core calls
        (PRELUDE, CODA), memoised by the item count per depth."""
        if not batch.num_core_calls:
            if self._no_depths < 0:
                self._no_depths = self.strings.code("")
            return self._no_depths
        counts = self._counts
        for it in batch.items:
            end = it.depth + it.num_depths
            while end > len(counts):
                counts.append(0)
            for d in range(it.depth, end):
                counts[d] = counts[d] + 1  # compiled, += on a list item is a generic call
        key = tuple(counts)
        for d in range(len(counts)):
            counts[d] = 0
        code = self._depth_codes.get(key)
        if code is None:
            code = self._depth_codes[key] = self.strings.code(depths_text(batch.depth_counts()))
        return code

    def _flush(self) -> None:
        """Move the pending rows into the public columns."""
        self._start_s.flush()
        self._end_s.flush()
        rows = self._p_rows
        if not rows:
            return
        self._step.frombytes(wide_field_bytes(rows, 0, _ROW))
        kinds = field_byte(rows, 2, _ROW)
        self._stage.frombytes(kinds.translate(_translation(self._stage_codes)))
        self._kind.frombytes(kinds.translate(_translation(self._kind_codes)))
        self._mixed.frombytes(kinds.translate(_MIXED))
        for field, column in enumerate((
                self._core_calls, self._num_decode_items, self._num_prompt_items,
                self._num_prompt_tokens, self._num_fused_prelude_items, self._depths,
                self._num_readbacks, self._max_prompt_items_per_request), 3):
            column.frombytes(field_bytes(rows, field, _ROW))
        del rows[:]

    def append(self, r: StepRecord) -> None:
        self._flush()
        codes = self.strings
        self._step.append(r.step)
        self._start_s.add(r.start_s)
        self._end_s.add(r.end_s)
        self._stage.append(codes.code(r.stage))
        self._kind.append(codes.code(r.kind))
        self._core_calls.append(r.core_calls)
        self._num_decode_items.append(r.num_decode_items)
        self._num_prompt_items.append(r.num_prompt_items)
        self._num_prompt_tokens.append(r.num_prompt_tokens)
        self._num_fused_prelude_items.append(r.num_fused_prelude_items)
        self._depths.append(codes.code(r.depths))
        self._mixed.append(1 if r.mixed else 0)
        self._num_readbacks.append(r.num_readbacks)
        self._max_prompt_items_per_request.append(r.max_prompt_items_per_request)

    def __len__(self) -> int:
        return len(self._step) + len(self._p_rows) // _ROW

    def row(self, i: int) -> StepRecord:
        """Row ``i`` (negative counts from the end) as a ``StepRecord``."""
        self._flush()
        i = row_position(i, len(self._step))
        s = self.strings.values
        return StepRecord(
            self._step[i], self._start_s.values[i], self._end_s.values[i], s[self._stage[i]],
            s[self._kind[i]], self._core_calls[i], self._num_decode_items[i],
            self._num_prompt_items[i], self._num_prompt_tokens[i],
            self._num_fused_prelude_items[i], s[self._depths[i]], bool(self._mixed[i]),
            self._num_readbacks[i], self._max_prompt_items_per_request[i],
        )

    # The public columns: each read moves the pending rows in first.
    @property
    def step(self) -> array[int]:
        self._flush()
        return self._step

    @property
    def start_s(self) -> array[float]:
        self._flush()
        return self._start_s.values

    @property
    def end_s(self) -> array[float]:
        self._flush()
        return self._end_s.values

    @property
    def stage(self) -> array[int]:
        self._flush()
        return self._stage

    @property
    def kind(self) -> array[int]:
        self._flush()
        return self._kind

    @property
    def core_calls(self) -> array[int]:
        self._flush()
        return self._core_calls

    @property
    def num_decode_items(self) -> array[int]:
        self._flush()
        return self._num_decode_items

    @property
    def num_prompt_items(self) -> array[int]:
        self._flush()
        return self._num_prompt_items

    @property
    def num_prompt_tokens(self) -> array[int]:
        self._flush()
        return self._num_prompt_tokens

    @property
    def num_fused_prelude_items(self) -> array[int]:
        self._flush()
        return self._num_fused_prelude_items

    @property
    def depths(self) -> array[int]:
        self._flush()
        return self._depths

    @property
    def mixed(self) -> array[int]:
        self._flush()
        return self._mixed

    @property
    def num_readbacks(self) -> array[int]:
        self._flush()
        return self._num_readbacks

    @property
    def max_prompt_items_per_request(self) -> array[int]:
        self._flush()
        return self._max_prompt_items_per_request
