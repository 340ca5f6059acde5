"""Small numpy and Arrow helpers for the columnar fan-in stages."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

RUN_VALUES = 4_000_000  # values looked up together (in_runs)
COUNTED_KEYS_PER_ROW = 4  # grouped_order counts keys up to this many per row (a counting pass is O(rows + keys))


def unique(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values. numpy 2.4's np.unique (without return_inverse) takes a hash
    path that took 3.9 s on 4M int64 pair codes here; sorting takes 0.03 s."""
    ordered = np.sort(np.asarray(values).reshape(-1))
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if len(ordered) else ordered


def distinct_codes(codes: np.ndarray, size: int) -> np.ndarray:
    """unique() of codes that lie in [0, size) (a dictionary's): marked in a mask, not sorted.
    0.07 s against 0.9 s for 20M chunk codes of 1.2M chunks."""
    seen = np.zeros(size, dtype=bool)
    seen[np.asarray(codes).reshape(-1)] = True
    return np.flatnonzero(seen)


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True): the sorted distinct values, and each value's index
    among them. Arrow hashes the values and numpy sorts only the distinct ones: 1.1-1.4 s on 12M
    int64 pair codes where np.unique, sorting them all, took 3.1 s."""
    values = np.asarray(values).reshape(-1)
    if not len(values):
        return values.copy(), np.zeros(0, np.int64)
    encoded = pc.dictionary_encode(pa.array(values))
    distinct = encoded.dictionary.to_numpy()
    order = np.argsort(distinct)  # no ties: numpy's default sort gives the stable order (2.3M: 0.07 s, stable 0.26 s)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return distinct[order], rank[encoded.indices.to_numpy()]


def grouped_distinct(group: np.ndarray, codes: np.ndarray, n_groups: int, n_codes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group 0..n_groups-1, the distinct codes (in [0, n_codes)) its rows carry, ascending:
    (indptr, codes), group g's a slice indptr[g]:indptr[g + 1]; what unique(group * n_codes +
    codes) holds, without sorting every pair. scipy puts the pairs in rows by code (a counting
    pass; each code's few groups sorted and made distinct), then in columns by group (a second
    counting pass, codes ascending): 9.6M mentions of 53k keys over 1.2M chunks in 0.2-0.5 s,
    where the sort took 0.9-1.0 s (synthetic, this host)."""
    import scipy.sparse as sp

    group, codes = np.asarray(group).reshape(-1), np.asarray(codes).reshape(-1)
    if not len(group):
        return np.zeros(n_groups + 1, np.int64), np.zeros(0, np.int32)
    by_code = sp.csr_matrix((np.ones(len(group), np.bool_), (codes, group)), shape=(max(n_codes, 1), n_groups))
    by_group = by_code.tocsc()
    return by_group.indptr.astype(np.int64), by_group.indices.astype(np.int32, copy=False)


def distinct_lists(group: np.ndarray, codes: np.ndarray, values: pa.Array, n_groups: int) -> pa.ListArray:
    """Per group 0..n_groups-1, the distinct values its rows carry, in sorted order (`codes`
    index `values` and sort as they do; a row of group -1 belongs to none)."""
    keep = group >= 0
    if not keep.all():
        group, codes = group[keep], codes[keep]
    offsets, distinct = grouped_distinct(group, codes, n_groups, len(values))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values.take(pa.array(distinct)))


def distinct_counts_by_code(group: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group 0..n_groups-1, how many distinct codes its rows carry (a row of group -1 belongs
    to none), for rows already in order of `codes`: the keys code * n_groups + group are then
    sorted but for short runs (the groups of one code), which a stable sort (timsort) merges in
    about one pass. 7.5M lineage items in 11 to 3,674 groups: 0.14-0.16 s, where sorting the
    keys group * width + code of unordered rows took 0.55-0.97 s (synthetic lineage, this host)."""
    keep = group >= 0
    if not keep.all():
        group, codes = group[keep], codes[keep]
    if not n_groups or not len(group):
        return np.zeros(n_groups, np.int64)
    keys = np.sort(np.asarray(codes, np.int64) * n_groups + group, kind="stable")
    firsts = keys[np.r_[True, keys[1:] != keys[:-1]]]
    return np.bincount(firsts % n_groups, minlength=n_groups)[:n_groups]


def grouped_order(group: np.ndarray) -> np.ndarray:
    """np.argsort(group, kind="stable") for non-negative integer groups: a counting pass
    (counted_order) where the groups are few beside the rows, else a sort of the distinct keys
    group * n + i, which numpy's SIMD sort orders where argsort falls back to timsort (6M rows in
    3,000 groups: 0.17 s against 0.89 s)."""
    n = len(group)
    if not n or group.min() < 0:
        return np.argsort(group, kind="stable")
    top = int(group.max()) + 1
    if top <= COUNTED_KEYS_PER_ROW * n + (1 << 20):
        return counted_order(group, top).astype(np.int64)
    if top * n >= 1 << 63:
        return np.argsort(group, kind="stable")
    return np.sort(np.asarray(group, np.int64) * n + np.arange(n)) % n


def counted_order(keys: np.ndarray, n_keys: int) -> np.ndarray:
    """np.argsort(keys, kind="stable") for integer keys in [0, n_keys), by one counting pass
    (transposed, each row holding one key): 8.4M keys among 53k in 0.15 s, where grouped_order's
    sort took 0.59 s (this host). int32 rows where they fit."""
    keys = np.asarray(keys).reshape(-1)
    n = len(keys)
    if not n:
        return np.zeros(0, np.int64)
    if int(keys.min()) < 0 or int(keys.max()) >= n_keys:  # scipy does not check, and would write out of bounds
        raise ValueError(f"counted_order: keys outside [0, {n_keys})")
    return transposed(np.arange(n), keys, n, n_keys)[1]


def pair_order(a: np.ndarray, b: np.ndarray, n_a: int, n_b: int) -> np.ndarray:
    """np.argsort(a * n_b + b, kind="stable") for a in [0, n_a), b in [0, n_b): two counting
    passes (b's, then a's, a radix sort) instead of a sort of every key."""
    by_b = counted_order(b, n_b)
    return by_b[counted_order(np.asarray(a)[by_b], n_a)]


def pair_inverse(a: np.ndarray, b: np.ndarray, n_a: int, n_b: int) -> tuple[np.ndarray, np.ndarray]:
    """unique_inverse(a * n_b + b) for a in [0, n_a), b in [0, n_b): the sorted distinct codes,
    and each pair's index among them, from pair_order instead of a hash of every code (8.4M
    assertions' endpoint pairs of 53k entities: 1.1 s against 2.4 s, this host)."""
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if not len(a):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = pair_order(a, b, n_a, n_b)
    codes = a[order].astype(np.int64) * n_b + b[order]
    first = np.r_[True, codes[1:] != codes[:-1]]
    inverse = np.empty(len(a), np.int64)
    inverse[order] = np.cumsum(first) - 1
    return codes[first], inverse


def transposed(rows: np.ndarray, cols: np.ndarray, n_rows: int, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """For (row, col) pairs in order of row: (each column's number of pairs, the pairs' rows
    grouped by column, in row order inside a column), a sparse matrix's transpose. scipy's
    counting pass puts each pair in place: 9.6M mention edges of 1.2M chunks in 0.16 s, where
    grouped_order's sort of the columns took 0.76 s."""
    import scipy.sparse as sp

    if not len(rows):
        return np.zeros(n_cols, np.int64), np.zeros(0, np.int64)
    indptr = np.zeros(n_rows + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    matrix = sp.csr_matrix((np.ones(len(cols), np.int8), np.asarray(cols), indptr), shape=(n_rows, n_cols))
    by_col = matrix.tocsc()
    return np.diff(by_col.indptr).astype(np.int64), by_col.indices  # the rows as scipy holds them (int32 when they fit)


def spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """starts[i], starts[i] + 1, ..., starts[i] + lengths[i] - 1 for every i, one after the other:
    where a CSR row's entries, a list's items or a text's n-grams lie, without a Python loop."""
    lengths = np.asarray(lengths, np.int64)
    return np.repeat(np.asarray(starts, np.int64) - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))


def first_index(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Per key, the index of its first occurrence in `values`, -1 where it has none: one Arrow
    hash table of the values, probed by every key. A binary search per key over sorted values
    misses the cache at every step: 5M keys among 100k values, 0.69 s against 0.24 s."""
    if not len(values) or not len(keys):
        return np.full(len(keys), -1, np.int64)
    found = pc.index_in(pa.array(np.asarray(keys)), value_set=pa.array(np.asarray(values)))
    return to_numpy(pc.fill_null(found, -1), np.int64)


def sorted_index(sorted_values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Per key, its position among `sorted_values` (sorted, distinct), -1 where it has none: a
    binary search per key, for values already sorted (first_index hashes the values instead)."""
    keys = np.asarray(keys)
    if not len(sorted_values) or not len(keys):
        return np.full(len(keys), -1, np.int64)
    at = np.minimum(np.searchsorted(sorted_values, keys), len(sorted_values) - 1)
    return np.where(sorted_values[at] == keys, at, -1).astype(np.int64, copy=False)


def to_numpy(column, dtype) -> np.ndarray:
    """An Arrow array or chunked array as numpy, in `dtype` (a view when Arrow's buffer allows)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=dtype)


def sorted_codes(column) -> tuple[np.ndarray, pa.Array]:
    """(a code per row, the distinct values sorted): codes sort as the values do, and the strings
    stay in Arrow. One sort (a dense rank): hashing the values, then sorting the distinct ones and
    looking every row up among them, took 7.4 s on 5.2M relationship ids, the rank 3.2 s."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    codes = to_numpy(pc.rank(array, sort_keys="ascending", tiebreaker="dense"), np.int64) - 1
    first = np.empty(int(codes.max()) + 1 if len(codes) else 0, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)  # a row holding each value
    return codes, array.take(pa.array(first))


def sorted_dictionary(values: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """sorted_codes' answer for values that repeat (chunk ids across chunk lists): hashed once,
    then only the distinct values sorted (8M ids of 1.2M chunks: 2.3 s, against 5.6 s for
    sorted_codes' rank and 3.3 s for unique, sort and a lookup of every value). Codes are int32."""
    encoded = pc.dictionary_encode(values, null_encoding="encode")  # a null, if any, is a value (sorted last)
    order = to_numpy(pc.sort_indices(encoded.dictionary), np.int64)
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return rank[to_numpy(encoded.indices, np.int64)], encoded.dictionary.take(pa.array(order))


def in_runs(batches: Iterable, size: Callable[[object], int], values: int = RUN_VALUES) -> Iterator[list]:
    """The batches in runs of about `values` values (`size(batch)`). A lookup (pc.index_in,
    pc.is_in) hashes its whole value set on every call: against 1.2M chunk ids that is 0.3 s, so
    batches are looked up a run at a time, not one at a time."""
    run, n = [], 0
    for batch in batches:
        run.append(batch)
        n += size(batch)
        if n >= values:
            yield run
            run, n = [], 0
    if run:
        yield run


def fixed_bytes(values) -> np.ndarray | None:
    """Strings of one length (content hashes) as a numpy bytes array cut from the Arrow data
    buffer, which numpy sorts and searches without a Python object per value; None when they
    differ in length, hold a null, or end in a zero byte (which numpy drops)."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    values = values.cast(pa.string())
    if values.null_count or not len(values):
        return None if values.null_count else np.zeros(0, dtype="S1")
    lengths = to_numpy(pc.binary_length(values), np.int64)
    width = int(lengths.max())
    if int(lengths.min()) != width or width == 0:
        return None
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=len(values) + 1, offset=values.offset * 4)
    data = np.frombuffer(values.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    if not np.all(data.reshape(-1, width)[:, -1]):  # a value ending in a zero byte
        return None
    return data.view(f"S{width}").copy()
