"""Where each answer of the LLM cache is: its key's 64-bit code (ids.id_codes) with the data file
and row that hold it, sorted by code and kept beside the table (`state/llm_cache/keys.arrow`).
A lookup then finds its keys by binary search and reads only the files that hold them, instead
of scanning every key of the cache (a stage's lookup of 712 keys took 0.69 s at 1.2M cached
answers, and grew with the cache).

The state names the data files it covers. Files the table gained since (appended answers) have
their key column read and coded; files it lost (compaction) are dropped; a file that is both
(a file rewritten under the same name, which Delta does not do) would be read again. A state
that cannot be read, or of another format, is made again from every file's keys. Two
processes that bring it up to date at once each write a whole state; the last one stays."""

from __future__ import annotations

import json
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.ids import id_codes
from graphwright.storage.patch import data_files, read_data_file

FORMAT = 1
STATE = "state/llm_cache/keys.arrow"
TABLE = "llm_cache"
_kept: dict[str, tuple[tuple[str, ...], KeyIndex]] = {}  # per index path: the files and index last seen
_lock = threading.Lock()


class KeyIndex:
    """Sorted key codes with the file (an index into `files`) and row of each."""

    def __init__(self, files: list[str], code: np.ndarray, file: np.ndarray, row: np.ndarray):
        self.files, self.code, self.file, self.row = files, code, file, row

    def where(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(file, row) of every entry whose code is one of `codes`."""
        lo, hi = np.searchsorted(self.code, codes, "left"), np.searchsorted(self.code, codes, "right")
        at = np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(), hi.tolist()) if b > a] or [np.empty(0, np.int64)])
        return self.file[at], self.row[at]

    def table(self) -> pa.Table:
        return pa.table({"code": self.code, "file": self.file, "row": self.row}).replace_schema_metadata(
            {"graphwright": json.dumps({"format": FORMAT, "files": self.files})})


def key_index(store) -> KeyIndex:
    """The index of the cache's current data files, brought up to date (and saved) if need be."""
    files = tuple(path for path, _ in data_files(store, TABLE))
    root = str(store.root)
    with _lock:
        seen = _kept.get(root)
    if seen is not None and seen[0] == files:
        return seen[1]
    before = seen[1] if seen is not None else _load(store)
    index = _advanced(store, before, list(files))
    if before is None or index.files != before.files:
        store.files.write_table(STATE, index.table())
    with _lock:
        _kept[root] = (files, index)
    return index


def answers(store, index: KeyIndex, wanted: pa.Array, columns: list[str]) -> pa.Table | None:
    """`columns` (the key among them) of the rows whose key is among `wanted` (distinct keys),
    read from the files the index names for their codes, a key stored twice giving its first
    row; None when none is there."""
    file, row = index.where(np.unique(id_codes(wanted).to_numpy(zero_copy_only=False)))
    parts = [read_data_file(store, TABLE, index.files[f], columns).take(pa.array(np.sort(row[file == f])))
             for f in np.unique(file).tolist()]
    if not parts:
        return None
    found = pa.concat_tables(parts)
    found = found.filter(pc.is_in(found.column("key"), value_set=wanted))  # codes can collide
    first = pc.index_in(pc.unique(found.column("key")), value_set=found.column("key")).to_numpy(zero_copy_only=False)
    if len(first) == found.num_rows:
        return found
    keep = np.zeros(found.num_rows, dtype=bool)
    keep[first] = True
    # a filter, not a take: a take joins each column into one array, and a round's answers can
    # pass the 2 GB a string array holds (1.2M cached extractions did)
    return found.filter(pa.array(keep))


def _load(store) -> KeyIndex | None:
    try:
        table = store.files.read_table(STATE)
        meta = json.loads((table.schema.metadata or {}).get(b"graphwright", b"{}"))
    except Exception:  # noqa: BLE001 - none yet, or unreadable: made again from the files
        return None
    if meta.get("format") != FORMAT or not {"code", "file", "row"} <= set(table.column_names):
        return None
    arrays = [table.column(c).to_numpy() for c in ("code", "file", "row")]
    return KeyIndex(list(meta.get("files", [])), *arrays)


def _advanced(store, before: KeyIndex | None, files: list[str]) -> KeyIndex:
    """`before` with the rows of files no longer current dropped and those of new files added."""
    had = before.files if before is not None else []
    position = {f: i for i, f in enumerate(files)}
    codes, file, row = [], [], []
    if before is not None and len(before.code):
        now = np.array([position.get(f, -1) for f in had], np.int64)[before.file]  # old file index -> new
        keep = now >= 0
        codes, file, row = [before.code[keep]], [now[keep].astype(np.int32)], [before.row[keep]]
    for f in sorted(set(files) - set(had)):
        keys = read_data_file(store, TABLE, f, ["key"]).column("key")
        codes.append(id_codes(keys).to_numpy(zero_copy_only=False))
        file.append(np.full(len(keys), position[f], np.int32))
        row.append(np.arange(len(keys), dtype=np.int32))
    code = np.concatenate(codes) if codes else np.empty(0, np.int64)
    order = np.argsort(code, kind="stable")
    return KeyIndex(files, code[order], np.concatenate(file)[order] if file else np.empty(0, np.int32),
                    np.concatenate(row)[order] if row else np.empty(0, np.int32))
