"""Resolve: rows as integer codes. Names, chunks, documents and types become codes in the
order first seen (Arrow dictionary encoding), so that the group-bys are numpy sorts and Python
objects exist per distinct value, not per row."""

from __future__ import annotations

import zlib

from collections.abc import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.util import memory
from graphwright.util.numeric import first_index, fixed_bytes, to_numpy, unique

Scan = Callable[[list[str]], Iterable[pa.RecordBatch]]


BATCH_ROWS = 65_536


def as_scan(rows: pa.Table | Scan) -> Scan:
    if isinstance(rows, pa.Table):
        return lambda columns: rows.select(columns).to_batches(max_chunksize=BATCH_ROWS)
    return rows


class Dictionary:
    """Distinct strings met across batches, coded in the order they were first seen; with `key`,
    each one's key is computed once.

    Values loaded from a state (`loaded`) stay in Arrow until a caller asks for them as Python
    (`values`): an update codes a few new files, and each batch's distinct values are found among
    the loaded ones by probing them against a hash of the batch's (the 1.2M chunk ids of 1.2M
    chunks: 25 ms a batch), instead of a Python string and a dict entry for every loaded value
    (0.8 s of every update). After PROBES batches (a build, or a large update) the dict is made."""

    PROBES = 16

    def __init__(self, key: Callable[[str], str] | None = None, loaded: pa.Array | None = None,
                 keys: list[str] | None = None):
        self.key = key
        self._loaded = pa.array([], pa.string()) if loaded is None else loaded.cast(pa.string())
        self._added: list[str] = []  # values coded after those loaded
        self._list: list[str] | None = None  # the loaded values and the added ones, once asked for
        self._keys: list[str] = list(keys or [])
        self._code: dict[str, int] = {}  # value -> code: the added values', or every value's once made
        self._whole = not len(self._loaded)  # whether _code holds the loaded values too
        self._probes = 0

    def __len__(self) -> int:
        return len(self._loaded) + len(self._added)

    @property
    def values(self) -> list[str]:
        """Every value, in code order, as Python strings (made once; values coded later join it)."""
        if not len(self._loaded):
            return self._added
        if self._list is None:
            self._list = self._loaded.to_pylist() + self._added
        return self._list

    def values_from(self, start: int) -> list[str]:
        """values[start:], without making Python strings of the loaded values before `start`."""
        n = len(self._loaded)
        if self._list is not None:
            return self._list[start:]
        return self._loaded.slice(start).to_pylist() + self._added if start < n else self._added[start - n:]

    def arrow(self, start: int = 0) -> pa.Array:
        """The values from code `start` on, as Arrow."""
        n = len(self._loaded)
        return pa.concat_arrays([self._loaded.slice(min(start, n)), pa.array(self._added[max(start - n, 0):], pa.string())])

    @property
    def keys(self) -> np.ndarray:
        return np.array(self._keys, dtype=object)

    def _found(self, distinct: pa.Array, names: list[str]) -> list[int | None]:
        """The code of each of a batch's distinct values (`names`, as Python), None for those not coded yet."""
        if not self._whole and self._probes >= self.PROBES:
            self._code.update((v, i) for i, v in enumerate(self.values[:len(self._loaded)]))
            self._whole = True
        found = [self._code.get(v) for v in names]
        if not self._whole and len(names):  # the loaded values probed against a hash of the batch's
            self._probes += 1
            at = pc.index_in(self._loaded, value_set=distinct.cast(pa.string()))
            codes = np.flatnonzero(to_numpy(pc.is_valid(at), bool))
            for code, j in zip(codes.tolist(), to_numpy(at.filter(pc.is_valid(at)), np.int64).tolist()):
                found[j] = code
        return found

    def codes(self, column: pa.Array) -> np.ndarray:
        """The code of every row (Arrow dictionary encoding: Python sees each batch's distinct values)."""
        encoded = column.dictionary_encode()
        distinct = encoded.dictionary
        names = distinct.to_pylist()
        local = self._found(distinct, names)
        for j, (value, code) in enumerate(zip(names, local)):
            if code is None:
                code = local[j] = self._code[value] = len(self)
                self._added.append(value)
                if self._list is not None:
                    self._list.append(value)
                if self.key is not None:
                    self._keys.append(self.key(value))
        return np.asarray(local, dtype=np.int64)[to_numpy(encoded.indices, np.int64)] if len(column) else np.empty(0, np.int64)

    def sort(self, previous: np.ndarray | None = None) -> tuple[pa.Array, np.ndarray]:
        """(the values in sorted order, the sorted position of each code): recoded, codes sort as the values do.
        Arrow sorts UTF-8 bytes, whose order is the code points' (Python's): 0.5 s for the 1.2M
        chunk ids of 1.2M chunks, against 2.3 s for numpy's sort of Python strings. `previous`:
        the positions an earlier sort gave the first codes; when they still sort those values
        (a dictionary only grows), only the values added since are sorted and merged in."""
        values = self.arrow()
        order = _merged_order(values, previous) if previous is not None else None
        if order is None:
            order = to_numpy(pc.sort_indices(values), np.int64)
        position = np.empty(len(order), dtype=np.int32)
        position[order] = np.arange(len(order), dtype=np.int32)
        return values.take(order), position


def _merged_order(values: pa.Array, previous: np.ndarray) -> np.ndarray | None:
    """The codes in sorted order from `previous` (the sorted positions of the first codes) and a
    sort of the rest, merged by binary search over the values' bytes; None when `previous` does
    not sort those values (another dictionary's) or the values are not all of one length."""
    n_old = len(previous)
    if not 0 < n_old <= len(values):
        return None
    previous = np.asarray(previous, np.int64)
    old_order = np.full(n_old, -1, np.int64)
    if previous.min() < 0 or previous.max() >= n_old:
        return None
    old_order[previous] = np.arange(n_old)
    if (old_order < 0).any():  # not a permutation
        return None
    new_order = to_numpy(pc.sort_indices(values.slice(n_old)), np.int64)
    old_sorted = fixed_bytes(values.take(pa.array(old_order)))
    new_sorted = fixed_bytes(values.slice(n_old).take(pa.array(new_order)))
    if old_sorted is None or new_sorted is None or (len(new_sorted) and new_sorted.dtype != old_sorted.dtype):
        return None
    if n_old > 1 and not (old_sorted[1:] > old_sorted[:-1]).all():
        return None
    at = np.searchsorted(old_sorted, new_sorted)  # a new value goes before the old one at `at`
    order = np.empty(len(values), np.int64)
    order[np.arange(n_old) + np.searchsorted(at, np.arange(n_old), side="right")] = old_order
    order[at + np.arange(len(at))] = n_old + new_order
    return order


def read_codes(scan: Scan, coded: dict[str, Dictionary], number: str) -> dict[str, np.ndarray]:
    """One pass over a table: per row, the code of each `coded` column (int32), the `number`
    column, and the hash and length of its description. About 36 bytes a row."""
    dtypes = {**dict.fromkeys(coded, np.int32), number: np.float64 if number == "weight" else np.int32,
              "description": np.int64, "length": np.int32}
    parts: dict[str, list[np.ndarray]] = {c: [] for c in dtypes}
    for batch in scan([*coded, number, "description"]):
        for column, dictionary in coded.items():
            parts[column].append(dictionary.codes(batch.column(column)).astype(np.int32))
        # a copy: a zero-copy view would keep the whole imported batch alive, descriptions included
        parts[number].append(np.array(to_numpy(batch.column(number), dtypes[number]), copy=True))
        hashes, lengths = description_hashes(batch.column("description"))
        parts["description"].append(hashes)
        parts["length"].append(lengths.astype(np.int32))
    out = {}
    for column, dtype in dtypes.items():  # one column at a time, handing each one's pieces back
        out[column] = np.concatenate(parts.pop(column)) if parts[column] else np.empty(0, dtype)
        memory.release()
    return out


def corpus_rank(chunk_names: list[str], positions: dict) -> np.ndarray:
    """Each chunk's rank in corpus order: by `positions`, else by id."""
    order = sorted(range(len(chunk_names)),
                   key=lambda i: (0, positions[chunk_names[i]]) if chunk_names[i] in positions else (1, chunk_names[i]))
    rank = np.empty(len(chunk_names), dtype=np.int64)
    rank[order] = np.arange(len(chunk_names))
    return rank


DENSE_BINS = 1 << 24  # one bin per possible (group, code) pair up to this many: 128 MB a bincount


def group_sums(group: np.ndarray, code: np.ndarray, weights: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group, code, summed weight) per distinct (group, code) pair, sorted by group then code.
    Counted into one bin per possible pair when there are few (entity x type), else the distinct
    pairs sorted and every row looked up among them (entity x name, where each name has one
    entity): np.unique(return_inverse=True) took 2.5-3.5 s on the 9.6M mentions of 1.2M chunks."""
    key = np.asarray(group, np.int64) * width + code
    bins = (int(key.max()) + 1) if len(key) else 0
    if bins <= DENSE_BINS and (not len(key) or key.min() >= 0):
        pairs = np.flatnonzero(np.bincount(key, minlength=bins))
        sums = np.bincount(key, weights=weights, minlength=bins)[pairs]
    else:
        pairs = unique(key)
        sums = np.bincount(first_index(pairs, key), weights=weights, minlength=len(pairs))
    return pairs // width, pairs % width, sums


def text_hashes(texts: list[str]) -> np.ndarray:
    """A 64-bit hash per text that is the same in every process (resolve's state keeps them
    between runs; Python's `hash` is seeded per process): CRC-32 and Adler-32, 0.6 us a text
    against blake2b's 1.6 us."""
    crc, adler = zlib.crc32, zlib.adler32
    return np.array([(crc(b) << 32) ^ adler(b) for b in (t.encode() for t in texts)], dtype=np.uint64).view(np.int64)


def description_hashes(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(64-bit hash, length in characters) per row; length 0 for a missing or empty description.
    Two distinct descriptions of one entity sharing a hash would merge (p ~ n^2 / 2^64)."""
    encoded = column.dictionary_encode()
    if not len(encoded.dictionary):
        return np.zeros(len(column), np.int64), np.zeros(len(column), np.int64)
    hashes = text_hashes(encoded.dictionary.to_pylist())
    lengths = to_numpy(pc.utf8_length(encoded.dictionary), np.int64)
    index = to_numpy(pc.fill_null(encoded.indices, -1), np.int64)
    present = index >= 0
    index[~present] = 0
    return np.where(present, hashes[index], 0), np.where(present, lengths[index], 0)


def best_names(group: np.ndarray, name_code: np.ndarray, count: np.ndarray, n_groups: int, names: list[str]) -> list[str]:
    """Per group, its most mentioned name (then the longest, then the first in order)."""
    g, code, total = name_totals(group, name_code, count, max(len(names), 1))
    present = np.array([names[c] for c in code.tolist()], dtype=object)  # only the names the groups use are ranked
    name_rank = np.empty(len(code), dtype=np.int64)
    name_rank[np.argsort(present, kind="stable")] = np.arange(len(code))
    lengths = np.fromiter(map(len, present), np.int64, len(present))
    order = np.lexsort((name_rank, -lengths, -total, g))
    firsts = order[np.r_[True, g[order][1:] != g[order][:-1]]] if len(order) else order
    best = [""] * n_groups
    for gi, ci in zip(g[firsts].tolist(), code[firsts].tolist()):
        best[gi] = names[ci]
    return best


def name_totals(group: np.ndarray, name_code: np.ndarray, count: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """group_sums(group, name_code, count, width) when each name lies in one group (a name has one
    key, a key one entity): the counts summed per name in `width` bins and each name given its
    group, instead of sorting every row's (group, name) pair (the hubs' 7.7M mentions a 0.1%
    update rebuilds at 1.2M chunks: 0.85 s). Rows of group -1 belong to none."""
    if len(group) and group.min() < 0:
        keep = group >= 0
        group, name_code, count = group[keep], name_code[keep], count[keep]
    group_of = np.full(width, -1, np.int64)
    group_of[name_code] = group
    if not np.array_equal(group_of[name_code], group):  # a name in two groups: sum the pairs
        return group_sums(group, name_code, count, width)
    code = np.flatnonzero(group_of >= 0)
    g = group_of[code]
    order = np.argsort(g, kind="stable")  # by group, then name (as group_sums gives them)
    return g[order], code[order], np.bincount(name_code, weights=count, minlength=width)[code][order]
