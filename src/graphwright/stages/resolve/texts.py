"""Resolve: description texts by their 64-bit hashes. The coded rows hold each description's
hash and the place of its row; a text is read from the data files only when a description plan
needs it, and only the description column of the files that hold one, a few files at a time.
A plan knows a row holding each description it groups, so the row is not looked for."""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from graphwright.stages.resolve.descriptions import Texts
from graphwright.storage.patch import read_data_file
from graphwright.util.numeric import first_index, unique

READERS = 4  # data files read at a time (each decodes its description column in Arrow, off the GIL)


def text_fetcher(store, table: str, file_paths: list[str], rows: dict[str, np.ndarray], candidates: np.ndarray | None):
    """A function from description hashes (and, where the caller knows them, a row of `rows`
    holding each) to their Texts, read from the data files, in those only the description
    column. Without rows given, the rows are looked for among `candidates` (row indices; None:
    any row)."""

    def fetch(wanted: np.ndarray, at: np.ndarray | None = None) -> Texts:
        if at is not None:
            wanted, first = np.unique(wanted, return_index=True) if len(wanted) else (np.empty(0, np.int64), np.empty(0, np.int64))
            at = at[first]
        else:
            wanted = unique(wanted) if len(wanted) else np.empty(0, np.int64)
        return _read(store, table, file_paths, rows, candidates, wanted, at)

    fetch.fetches_texts = True
    return fetch


def _read(store, table: str, file_paths: list[str], rows: dict[str, np.ndarray], candidates: np.ndarray | None,
          wanted: np.ndarray, at: np.ndarray | None) -> Texts:
    """The Texts of `wanted` (sorted distinct hashes), read from the data files: from the rows
    `at`, or else from the first row of `candidates` holding each."""
    if not len(wanted):
        return Texts(np.empty(0, np.int64), pa.array([], pa.string()))
    if at is not None:  # the plans said where (at 1.2M chunks, looking among the hubs' rows took 1.5-2 s)
        firsts = at
    else:
        pool = np.arange(len(rows["description"])) if candidates is None else candidates
        # per wanted hash, the first row holding it: the pool's rows probe a hash table of the
        # wanted hashes, and the first hit of each is looked up among the hits
        hit = pool[first_index(wanted, rows["description"][pool]) >= 0]
        if len(hit) > 1 and not (hit[1:] > hit[:-1]).all():
            hit = np.sort(hit)
        first = first_index(rows["description"][hit], wanted)
        firsts = hit[first[first >= 0]]
    by_file = defaultdict(list)
    for row, f, place in zip(firsts.tolist(), rows["file"][firsts].tolist(), rows["row"][firsts].tolist()):
        by_file[f].append((row, place))

    def texts_of(f: int, items: list[tuple[int, int]]) -> pa.Array:
        column = read_data_file(store, table, file_paths[f], ["description"]).column("description")
        return column.take(pa.array([p for _, p in items], pa.int64())).combine_chunks().cast(pa.string())

    with ThreadPoolExecutor(READERS, thread_name_prefix=f"texts-{table}") as readers:
        got_texts = list(readers.map(texts_of, by_file.keys(), by_file.values()))
    picked = np.array([r for items in by_file.values() for r, _ in items], dtype=np.int64)
    texts = pa.concat_arrays([pa.array([], pa.string())] + got_texts)
    order = np.argsort(rows["description"][picked], kind="stable")
    return Texts(rows["description"][picked][order], texts.take(pa.array(order)))
