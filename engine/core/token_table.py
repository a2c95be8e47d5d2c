"""tokens.csv's rows as columns (``TokenTable``, re-exported by ``engine.core.columns``)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Final

from engine.core.results import TokenEvent
from engine.core.row_table import (
    FLUSH_ROWS,
    MAX_INT32,
    Floats,
    RowTable,
    Strings,
    field_byte,
    field_bytes,
    row_position,
)

_ROW: Final = 4  # fields of a pending row
_FINISHED = bytes(v & 1 for v in range(256))
_REASON = bytes(((v >> 1) - 1) & 0xFF for v in range(256))  # no reason: 0xFF, -1 as 'b'


class TokenTable(RowTable):
    """tokens.csv's rows (``TokenEvent``) as columns: ``request`` holds codes into
    ``request_ids`` and ``finish_reason`` codes into ``reasons`` (-1: None); the other columns
    are ``index``, ``time_s``, ``token_id``, ``exit_depth`` and ``finished``."""

    def __init__(self) -> None:
        self.request_ids = Strings()
        self.reasons = Strings()
        self._request = array("i")
        self._index = array("i")
        self._time_s = Floats()
        self._token_id = array("i")
        self._exit_depth = array("b")
        self._finished = array("b")
        self._finish_reason = array("b")
        # Rows not yet in the columns above (engine.core.row_table): request code, index,
        # token id, and the exit depth in the low byte of a field whose second byte is the
        # status, ``finished | (finish reason code + 1) << 1``.
        self._p_rows = array("I")

    @staticmethod
    def of(events: Iterable[TokenEvent]) -> TokenTable:
        table = TokenTable()
        table.extend(events)
        return table

    def append(self, e: TokenEvent) -> None:
        self.extend((e,))

    def extend(self, rows: Iterable[TokenEvent]) -> None:
        """Append each row (a step's events); the pending columns read once per call."""
        request_ids = self.request_ids
        code_of = request_ids.codes
        pending, time_s = self._p_rows, self._time_s
        for e in rows:
            code = code_of.get(e.request_id)
            if code is None:
                code = request_ids.code(e.request_id)
            reason = e.finish_reason
            status = 0 if reason is None else (self.reasons.code(reason) + 1) << 1
            if e.finished:
                status |= 1
            depth = e.exit_depth
            # The columns take the pending bytes as they are: what their own append would
            # refuse (an int32 past its range, an exit depth past a signed byte) is refused
            # (a negative id by ``fromlist``, which then adds nothing) before the time is added.
            if (code | e.index | e.token_id) > MAX_INT32 or not 0 <= depth <= 127:
                raise OverflowError(f"token {e.index} of {e.request_id}: a field exceeds the "
                                    "token table's columns")
            pending.fromlist([code, e.index, e.token_id, depth | status << 8])
            time_s.add(e.time_s)
        if len(pending) >= FLUSH_ROWS * _ROW:
            self._flush()

    def _flush(self) -> None:
        """Move the pending rows into the public columns."""
        self._time_s.flush()
        if not self._p_rows:
            return
        pending = self._p_rows
        self._request.frombytes(field_bytes(pending, 0, _ROW))
        self._index.frombytes(field_bytes(pending, 1, _ROW))
        self._token_id.frombytes(field_bytes(pending, 2, _ROW))
        self._exit_depth.frombytes(field_byte(pending, 3, _ROW))
        status = field_byte(pending, 3, _ROW, 1)
        self._finished.frombytes(status.translate(_FINISHED))
        self._finish_reason.frombytes(status.translate(_REASON))
        del pending[:]

    def __len__(self) -> int:
        return len(self._index) + len(self._p_rows) // _ROW

    def previous(self) -> array[int]:
        """Per row, the row of the same request's previous token (-1 for its first);
        ValueError when a request's tokens are out of order."""
        self._flush()
        last = array("q", [-1]) * len(self.request_ids.values)
        prev = array("q", [-1]) * len(self._index)
        request, index = self._request, self._index
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
        prev, time_s = self.previous(), self._time_s.values
        out = array("d")
        for k in range(len(prev)):
            j = prev[k]
            if j >= 0:
                out.append(time_s[k] - time_s[j])
        return out

    def row(self, i: int) -> TokenEvent:
        """Row ``i`` (negative counts from the end) as a ``TokenEvent``."""
        self._flush()
        i = row_position(i, len(self._index))
        code = self._finish_reason[i]
        return TokenEvent(
            self.request_ids.values[self._request[i]], self._index[i], self._time_s.values[i],
            self._token_id[i], self._exit_depth[i], bool(self._finished[i]),
            None if code < 0 else self.reasons.values[code],
        )

    # The public columns: each read moves the pending rows in first.
    @property
    def request(self) -> array[int]:
        self._flush()
        return self._request

    @property
    def index(self) -> array[int]:
        self._flush()
        return self._index

    @property
    def time_s(self) -> array[float]:
        self._flush()
        return self._time_s.values

    @property
    def token_id(self) -> array[int]:
        self._flush()
        return self._token_id

    @property
    def exit_depth(self) -> array[int]:
        self._flush()
        return self._exit_depth

    @property
    def finished(self) -> array[int]:
        self._flush()
        return self._finished

    @property
    def finish_reason(self) -> array[int]:
        self._flush()
        return self._finish_reason
