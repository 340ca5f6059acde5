"""Row diffs between two versions of a table, columnar: rows are never Python objects. Whole
rows compare as 64-bit digests, so a table too large to hold twice diffs against a streamed scan."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DIGEST_ROWS, DIGEST_ITEMS = 8192, 1_000_000  # rows and list items per slice in row_digests


def row_diff(old: pa.Table, new: pa.Table, key: tuple[str, ...]) -> dict[str, int]:
    """How `new` differs from `old`, row by row, matched on the primary key. Columnar: rows are
    never Python objects (a million relationships as dicts took more than 10 GB)."""
    old_key, new_key = key_column(old, key), key_column(new, key)
    in_old = pc.is_in(new_key, value_set=old_key)
    in_new = pc.is_in(old_key, value_set=new_key)
    common = pc.sum(in_old).as_py() or 0
    changed = 0
    if common:
        before = old.filter(in_new).append_column("__key", old_key.filter(in_new)).sort_by("__key")
        after = new.filter(in_old).append_column("__key", new_key.filter(in_old)).sort_by("__key")
        same = np.ones(common, dtype=bool)
        for column in dict.fromkeys(old.column_names + new.column_names):
            if column not in old.column_names or column not in new.column_names:
                same[:] = False
                break
            same &= _same_values(before.column(column).combine_chunks(), after.column(column).combine_chunks())
        changed = int((~same).sum())
    return {"added": new.num_rows - common, "removed": old.num_rows - common, "changed": changed, "unchanged": common - changed}


def row_digests(table: pa.Table, key: tuple[str, ...]) -> pa.Table:
    """The key columns and a 64-bit digest of each whole row (`__digest`): row_diff over these
    answers row_diff over the rows themselves, for tables too large to hold twice. Digests come
    from Python's string hash, so they only compare within one process."""
    digest = np.empty(table.num_rows, dtype=np.int64)
    for start, stop in _digest_slices(table):  # rows joined as text are large: a slice at a time
        rows = table.slice(start, stop - start)
        text = pc.binary_join_element_wise(*(as_text(rows.column(c)) for c in rows.column_names), "\x1f")
        digest[start:stop] = [hash(t) for t in text.to_pylist()]
    return table.select(list(key)).append_column("__digest", pa.array(digest, pa.int64()))


def _digest_slices(table: pa.Table) -> list[tuple[int, int]]:
    """Row ranges of at most DIGEST_ROWS rows and, where rows hold lists, about DIGEST_ITEMS list
    items (a communities table lists a million chunks in one row)."""
    size = np.ones(table.num_rows, dtype=np.int64)
    for column in table.itercolumns():
        if _is_list(column.type):
            size += pc.fill_null(pc.list_value_length(column), 0).to_numpy().astype(np.int64)
    ends = np.cumsum(size)
    cuts = np.searchsorted(ends, np.arange(DIGEST_ITEMS, int(ends[-1]) if len(ends) else 0, DIGEST_ITEMS), side="right")
    bounds = np.unique(np.concatenate([[0, table.num_rows], np.arange(0, table.num_rows, DIGEST_ROWS), cuts]))
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds.tolist()) if b > a]


def as_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A column as strings, nulls as "\\x00"; a list as its elements joined by "\\x1e"."""
    if _is_list(column.type):
        column = pc.binary_join(column.cast(pa.list_(pa.string())), "\x1e")
    return pc.fill_null(column.cast(pa.string()), "\x00")


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def key_column(table: pa.Table, key: tuple[str, ...]) -> pa.Array:
    columns = [table.column(k).cast(pa.string()).combine_chunks() for k in key]
    return columns[0] if len(columns) == 1 else pc.binary_join_element_wise(*columns, "\x1f")


def exact_keys(table: pa.Table, columns: tuple[str, ...]) -> pa.Array:
    """Per row, a string that two rows share only if they hold the same values in `columns`
    (nulls included): each value is written as its length, ':' and itself, a null as '-'.
    key_column's joined values can collide when a value holds its separator, and are null when
    any value is."""
    parts = []
    for name in columns:
        values = table.column(name).cast(pa.string()).combine_chunks()
        length = pc.cast(pc.utf8_length(values), pa.string())
        parts.append(pc.fill_null(pc.binary_join_element_wise(length, values, ":"), "-"))
    return pc.binary_join_element_wise(*parts, "")


def _same_values(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Per row, whether a and b hold the same value (nulls equal nulls; lists element by element)."""
    both_null = np.asarray(pc.and_(pc.is_null(a), pc.is_null(b)))
    if _is_list(a.type):
        same = both_null | np.asarray(pc.fill_null(pc.equal(pc.list_value_length(a), pc.list_value_length(b)), False))
        rows = np.flatnonzero(same & ~both_null)  # equal lengths: their elements line up
        if len(rows):
            picked_a, picked_b = a.take(pa.array(rows)), b.take(pa.array(rows))
            element_same = _same_values(pc.list_flatten(picked_a), pc.list_flatten(picked_b))
            owner = np.asarray(pc.list_parent_indices(picked_a))
            differ = np.zeros(len(rows), dtype=bool)
            differ[owner[~element_same]] = True
            same[rows[differ]] = False
        return same
    return both_null | np.asarray(pc.fill_null(pc.equal(a, b), False))
