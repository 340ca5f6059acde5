"""Where each answer of the LLM cache is: its key's 64-bit code (ids.id_codes) with the data file
and row that hold it, sorted by code and kept beside the table (`state/llm_cache/keys.arrow`).
A lookup then finds its keys by binary search and reads only the files that hold a hit, instead
of joining them against every key of the cache: a miss costs nothing that grows with the cache
(an update's extract looked up 712 keys in 0.69 s at 1.2M cached answers, 0.16-0.24 s timed
alone), and a hit costs reading the file that holds it.

The index names the data files it covers. Files the table gained since (appended answers) have
their key column read and coded, and their codes merged in; files it lost (compaction) are
dropped. Delta never writes a file under a name it used before; a file that was would keep its
stale entries. An index that cannot be read, or does not hold together, is made again from
every file's keys. Saving is best-effort, and done only once enough rows came since the last
save (a serving process that appends an answer a question keeps its additions in memory): two
processes that save at once each write a whole index, and the last one stays. An index on an
object store is not used: reading a file's key column there means downloading the file, so
lookups join against the table (cache.lookup)."""

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
SAVE_ROWS = 10_000  # rows added since the last save that make a save worth it (every dropped file does)
_kept: dict[str, tuple[tuple[str, ...], KeyIndex, int]] = {}  # per index path: the files, the index, rows not saved
_lock = threading.Lock()


class KeyIndex:
    """Sorted key codes with the file (an index into `files`) and row of each."""

    def __init__(self, files: list[str], code: np.ndarray, file: np.ndarray, row: np.ndarray):
        self.files, self.code, self.file, self.row = files, code, file, row

    def where(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(file, row) of every entry whose code is one of `codes`."""
        lo, hi = np.searchsorted(self.code, codes, "left"), np.searchsorted(self.code, codes, "right")
        n = hi - lo
        at = np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(n.sum())  # the entries of each code's run
        return self.file[at], self.row[at]

    def holds_together(self) -> bool:
        return len(self.code) == len(self.file) == len(self.row) and (
            not len(self.file) or 0 <= int(self.file.min()) <= int(self.file.max()) < len(self.files))

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
    index, added, dropped = _advanced(store, before, list(files))
    unsaved = (seen[2] if seen is not None else 0) + added
    if before is None or dropped or unsaved >= SAVE_ROWS:
        try:
            store.files.write_table(STATE, index.table())
            unsaved = 0
        except Exception:  # noqa: BLE001 - a read-only index, or a run's cleanup took the temporary file: kept in memory
            pass
    with _lock:
        _kept[root] = (files, index, unsaved)
    return index


def answers(store, index: KeyIndex, wanted: pa.Array, columns: list[str]) -> pa.Table | None:
    """`columns` (the key among them) of the rows whose key is among `wanted`, read from the
    files the index names for their codes (a key stored twice gives its first row); None when
    none is there."""
    file, row = index.where(np.unique(id_codes(wanted).to_numpy(zero_copy_only=False)))
    order = np.lexsort((row, file))
    file, row = file[order], row[order]
    starts = np.flatnonzero(np.r_[True, file[1:] != file[:-1]]) if len(file) else np.empty(0, np.int64)
    parts = [read_data_file(store, TABLE, index.files[file[a]], columns).take(pa.array(row[a:b]))
             for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(file)])]
    if not parts:
        return None
    found = pa.concat_tables(parts)
    return first_rows(found.filter(pc.is_in(found.column("key"), value_set=wanted)))  # codes can collide


def first_rows(found: pa.Table) -> pa.Table:
    """The first row of each key of `found`. A filter, not a take: a take joins each column into
    one array, and a round's answers can pass the 2 GB a string array holds (1.2M cached
    extractions did)."""
    first = pc.index_in(pc.unique(found.column("key")), value_set=found.column("key")).to_numpy(zero_copy_only=False)
    if len(first) == found.num_rows:
        return found
    keep = np.zeros(found.num_rows, dtype=bool)
    keep[first] = True
    return found.filter(pa.array(keep))


def _load(store) -> KeyIndex | None:
    try:
        table = store.files.read_table(STATE)
        meta = json.loads((table.schema.metadata or {}).get(b"graphwright", b"{}"))
    except Exception:  # noqa: BLE001 - none yet, or unreadable: made again from the files
        return None
    if meta.get("format") != FORMAT or not isinstance(meta.get("files"), list) or not {"code", "file", "row"} <= set(table.column_names):
        return None
    types = {"code": np.int64, "file": np.int32, "row": np.int32}
    index = KeyIndex(meta["files"], *(np.asarray(table.column(c).to_numpy(), t) for c, t in types.items()))
    return index if index.holds_together() else None


def _advanced(store, before: KeyIndex | None, files: list[str]) -> tuple[KeyIndex, int, bool]:
    """(`before` with the rows of files no longer current dropped and those of new files merged
    in, the rows added, whether any file was dropped)."""
    had = before.files if before is not None else []
    position = {f: i for i, f in enumerate(files)}
    code, file, row = np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, np.int32)
    dropped = False
    if before is not None and len(before.code):
        now = np.array([position.get(f, -1) for f in had], np.int64)[before.file]  # old file index -> new
        keep = now >= 0
        dropped = not keep.all()
        code, file, row = before.code[keep], now[keep].astype(np.int32), before.row[keep]
    new_codes, new_file, new_row = [], [], []
    for f in sorted(set(files) - set(had)):
        keys = read_data_file(store, TABLE, f, ["key"]).column("key")
        new_codes.append(id_codes(keys).to_numpy(zero_copy_only=False))
        new_file.append(np.full(len(keys), position[f], np.int32))
        new_row.append(np.arange(len(keys), dtype=np.int32))
    added = sum(map(len, new_codes))
    if added:  # merged into the sorted codes: one pass, not a sort of them all
        add_code = np.concatenate(new_codes)
        order = np.argsort(add_code, kind="stable")
        at = np.searchsorted(code, add_code[order], "right")
        code, file, row = (np.insert(a, at, np.concatenate(b)[order]) for a, b in
                           ((code, [add_code]), (file, new_file), (row, new_row)))
    return KeyIndex(files, code, file, row), added, dropped
