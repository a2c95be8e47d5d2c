"""The device mirror of the block tables always gathers exactly the host tables, zero-padded,
whatever order tables appear, grow, are re-allocated or outgrow the mirror's size."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.block_tables import DeviceBlockTables

OPS = st.lists(st.tuples(st.sampled_from(["grow", "realloc", "free", "call"]),
                         st.integers(0, 9), st.integers(1, 40)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(OPS, st.integers(1, 4), st.integers(1, 8))
def test_gathered_tables_equal_the_host_tables(ops: list[tuple[str, int, int]], rows: int,
                                               cols: int) -> None:
    mirror = DeviceBlockTables(rows, cols, torch.device("cpu"))
    tables: dict[tuple[str, int], list[int]] = {}
    counter = iter(range(1, 10**6))

    def key(i: int) -> tuple[str, int]:
        return (f"r{i}", 0)

    for op, i, n in ops:
        k = key(i)
        if op == "grow":
            tables.setdefault(k, []).extend(next(counter) for _ in range(n))
        elif op == "realloc":  # a new list for the same key (allocated again)
            tables[k] = [next(counter) for _ in range(n)]
        elif op == "free":
            tables.pop(k, None)
        elif tables:
            keys = sorted(tables)[: n % len(tables) + 1]
            row_keys = [(kk, 0) for kk in keys]
            ids, idx, vals = mirror.rows(row_keys, [tables[kk] for kk in keys],
                                         lambda kk: kk in tables)
            mirror.apply(torch.tensor(idx, dtype=torch.int64),
                         torch.tensor(vals, dtype=torch.int64))
            width = max(len(tables[kk]) for kk in keys)
            got = mirror.gather(torch.tensor(ids, dtype=torch.int64), width)
            want = [tables[kk] + [0] * (width - len(tables[kk])) for kk in keys]
            assert got.tolist() == want
            assert len(set(ids)) == len(ids)
