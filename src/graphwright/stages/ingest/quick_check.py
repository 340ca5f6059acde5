"""Ingest's quick check (rsync's and git's): a local source file whose size and modification time
are what they were when the last ingest read it without a problem is not read again. Its documents
are the indexed rows that read produced, so the diff sees them unchanged without their text being
read, hashed or spilled. At 100k documents in ten JSONL files, reading every file was 7-10 s of
every update (a no-op rerun included); an update now reads only the files that changed.

In a JSONL file that changed, each line is hashed (line_hash) and a line whose bytes the last
ingest read into a document still indexed from that file is not parsed either: its document is
that row. An edit of 24 records in a file of 10,000 (106 MB) parses 24 lines instead of 10,000.

The record (`state/ingest/sources.arrow`: path, size, mtime_ns, doc_id, line_hash) is written
after the documents are committed and names the `documents` version it describes. Any other
version (a `graphwright delete`, a failed run, another writer) and every file is read. A file
modified less than RACY_NS before it was looked at is read again next time whatever its size and
time (a second write within the same clock tick could keep them); its lines, which name their
bytes, are recorded. Object-store sources are always read.
`ingest.quick_check: false` reads every file each run.
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pyarrow as pa

from graphwright.stages.ingest.sources import JSONL_SUFFIXES, RECORD_SUFFIXES, KnownLine

FORMAT = 2  # bump when reading a file can give other documents than before (parsing, ids, hashes)
STATE = "state/ingest/sources.arrow"
RACY_NS = 2_000_000_000


class QuickCheck:
    """Which source files an ingest may take from the index instead of reading them."""

    def __init__(self, indexed: pa.Table, known: dict[str, tuple[int, int, dict[str, bytes | None]]], enabled: bool = True):
        self.indexed = indexed  # the indexed documents (doc_id, source_key, source, ... no text)
        # path -> (size, mtime_ns, {doc_id: its line_hash, None for no JSONL line}) when last read without a problem
        self.known = known
        self.enabled = enabled  # whether JSONL lines are hashed and recorded
        self.looked: dict[str, tuple[int, int, int]] = {}  # path -> (size, mtime_ns, when looked at)
        self.accepted: list[str] = []  # paths whose indexed rows stand for them in this run
        self.taken: list[str] = []  # doc ids of known lines of changed files, whose indexed rows stand for them
        self.line_of: dict[tuple[str, str], bytes] = {}  # (path, doc_id) -> line_hash, of this run's JSONL lines
        self._position: dict[str, int] | None = None
        self._columns: dict[str, list] = {}

    @classmethod
    def load(cls, store, indexed: pa.Table, enabled: bool = True) -> QuickCheck:
        """The record the last ingest left, if it describes the documents table as it is now."""
        known: dict[str, tuple[int, int, dict[str, bytes | None]]] = {}
        if enabled and indexed.num_rows:
            record = _read(store)
            meta = json.loads((record.schema.metadata or {}).get(b"graphwright", b"{}")) if record is not None else {}
            if meta.get("format") == FORMAT and meta.get("documents_version") == store.version("documents"):
                columns = ("path", "size", "mtime_ns", "doc_id", "line_hash")
                for path, size, mtime, doc_id, hashed in zip(*(record.column(c).to_pylist() for c in columns)):
                    known.setdefault(path, (size, mtime, {}))[2][doc_id] = hashed
        return cls(indexed, known, enabled)

    def keys(self, path, key: str) -> list[str] | None:
        """The source keys of the documents `path` gave when last read, if it is unchanged since
        and they are all still indexed from it (`key`: its key now, for a text file); else None."""
        if not isinstance(path, Path):
            return None
        try:
            stat = os.stat(path)
        except OSError:
            return None
        self.looked[str(path)] = (stat.st_size, stat.st_mtime_ns, time.time_ns())
        size, mtime, doc_ids = self.known.get(str(path), (None, None, {}))
        if (size, mtime) != (stat.st_size, stat.st_mtime_ns) or not doc_ids:
            return None
        rows = self._rows(list(doc_ids))
        if rows is None or any(s != str(path) for s in rows.column("source").to_pylist()):
            return None
        keys = rows.column("source_key").to_pylist()
        if path.suffix.lower() not in RECORD_SUFFIXES and keys != [key]:
            return None  # a text file's key is its path under the source folder: another folder was given
        return keys

    def accept(self, path) -> None:
        self.accepted.append(str(path))

    def lines(self, path) -> dict[bytes, tuple[str, str]] | None:
        """For a local JSONL file, {line_hash: (doc_id, source_key)} of the lines the last ingest
        read from it into documents still indexed from it (empty when none is known): its lines
        are then hashed, and these not parsed. None for other files, or with the check off."""
        if not self.enabled or not isinstance(path, Path) or path.suffix.lower() not in JSONL_SUFFIXES:
            return None
        _, _, doc_ids = self.known.get(str(path), (None, None, {}))
        out: dict[bytes, tuple[str, str]] = {}
        position = self._positions()
        for doc_id, hashed in doc_ids.items():
            at = position.get(doc_id)
            if hashed is not None and at is not None and self._column("source")[at] == str(path):
                out[hashed] = (doc_id, self._column("source_key")[at])
        return out

    def take_line(self, line: KnownLine) -> None:
        self.taken.append(line.doc_id)
        self.note_line(line.source, line.doc_id, line.line_hash)

    def note_line(self, path: str, doc_id: str, hashed: bytes) -> None:
        self.line_of[(path, doc_id)] = hashed

    def accepted_rows(self, columns: list[str]) -> pa.Table:
        """The indexed rows of the files and lines taken from the index, in `columns`."""
        doc_ids = [d for p in self.accepted for d in self.known[p][2]] + self.taken
        return self._rows(doc_ids).select(columns)

    def _column(self, name: str) -> list:
        if name not in self._columns:
            self._columns[name] = self.indexed.column(name).to_pylist()
        return self._columns[name]

    def _positions(self) -> dict[str, int]:
        if self._position is None:
            self._position = {d: i for i, d in enumerate(self.indexed.column("doc_id").to_pylist())}
        return self._position

    def _rows(self, doc_ids: list[str]) -> pa.Table | None:
        position = self._positions()
        at = [position.get(d) for d in doc_ids]
        return None if None in at else self.indexed.take(pa.array(at, pa.int64()))

    def save(self, store, incoming: pa.Table, troubled: set[str]) -> int:
        """Record the files looked at this run, read (or taken) without a problem, with the documents
        they gave (and a JSONL file's lines); for the documents version now. Returns how many files
        are recorded with their size and time (those not modified just before)."""
        by_source: dict[str, list[str]] = {}
        for doc_id, source in zip(incoming.column("doc_id").to_pylist(), incoming.column("source").to_pylist()):
            by_source.setdefault(source, []).append(doc_id)
        rows = {"path": [], "size": [], "mtime_ns": [], "doc_id": [], "line_hash": []}
        recorded, accepted = 0, set(self.accepted)
        for path, (size, mtime, looked_at) in self.looked.items():
            if path in troubled or not by_source.get(path):
                continue
            if mtime > looked_at - RACY_NS:  # its lines are recorded, never its size and time
                if not any((path, doc_id) in self.line_of for doc_id in by_source[path]):
                    continue
                size = mtime = -1
            else:
                recorded += 1
            # a file taken whole keeps the hashes it had; a file read, those of this run's lines
            kept = self.known[path][2] if path in accepted else {}
            for doc_id in by_source[path]:
                hashed = self.line_of.get((path, doc_id), kept.get(doc_id))
                for column, value in zip(rows, (path, size, mtime, doc_id, hashed)):
                    rows[column].append(value)
        meta = {"format": FORMAT, "documents_version": store.version("documents")}
        schema = pa.schema([("path", pa.string()), ("size", pa.int64()), ("mtime_ns", pa.int64()), ("doc_id", pa.string()),
                            ("line_hash", pa.binary())], metadata={"graphwright": json.dumps(meta)})
        store.files.write_table(STATE, pa.table(rows, schema=schema))
        return recorded


def troubled_sources(errors, failed: set[str]) -> set[str]:
    """The files that had a problem this run (an error names a file, or file:line)."""
    named = {e.source for e in errors} | set(failed)
    return named | {s.rsplit(":", 1)[0] for s in named if ":" in s}


def _read(store) -> pa.Table | None:
    try:
        data = store.files.read_bytes(STATE)
    except Exception:  # noqa: BLE001 - no record yet (or a damaged one): every file is read
        return None
    try:
        with pa.ipc.open_file(io.BytesIO(data)) as reader:
            return reader.read_all()
    except (pa.ArrowInvalid, OSError):
        return None

