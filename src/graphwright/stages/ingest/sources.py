"""Ingest: read sources into document rows (plain functions).

Sources: a folder of .txt/.md files (recursively), single .txt/.md files, JSONL and Parquet files
with `id` (or `title`) and `text` columns; on an object store (s3://bucket/prefix, gs://, abfss://)
an object, every object under a prefix, or a glob (s3://bucket/docs/*.md). Each bad input becomes
a SourceError naming the file and the reason; the rest is indexed.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pyarrow as pa

from graphwright import ids
from graphwright.stages.ingest.files import decode_text, folder_files
from graphwright.storage import contracts, location

__all__ = ["decode_text", "read_sources", "document_tables", "documents_table", "Document", "SourceError"]

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".text"}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
RECORD_SUFFIXES = {*JSONL_SUFFIXES, ".parquet"}


@dataclass(frozen=True)
class SourceError:
    source: str
    reason: str


@dataclass
class Document:
    source_key: str
    source: str
    title: str
    text: str
    metadata: dict = field(default_factory=dict)
    line_hash: bytes | None = None  # a JSONL record's line_hash, where the quick check records lines

    @property
    def doc_id(self) -> str:
        return ids.doc_id(self.source_key)


@dataclass(frozen=True)
class KnownLine:
    """A JSONL line the last ingest read, byte for byte, into an indexed document (quick_check):
    its document is that row, unread."""
    doc_id: str
    source_key: str
    source: str
    line_hash: bytes


BOM = b"\xef\xbb\xbf"


def line_hash(raw: bytes) -> bytes:
    """What identifies a JSONL line's bytes (its line ending aside). SHA-256, which CPUs hash in
    hardware: 10,000 lines of 106 MB in 0.08 s, BLAKE2b in 0.12-0.19 s."""
    return hashlib.sha256(raw.rstrip(b"\r\n")).digest()[:16]


@dataclass
class SourceBatch:
    documents: list[Document]
    errors: list[SourceError]
    # sources that failed as a whole: documents indexed from them are kept, not treated as deleted
    failed_sources: set[str]


def _title_from_text(text: str, fallback: str) -> str:
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip().lstrip("\ufeff")
        if line:
            return line[:200]
    return fallback


def _read_text_file(path: Path, source_key: str) -> Document:
    text = decode_text(path.read_bytes())
    return Document(source_key=source_key, source=str(path), title=path.stem, text=text)


def _record_documents(path: Path, records: Iterator[tuple[int, dict | KnownLine, bytes | None]], errors: list[SourceError]
                      ) -> Iterator[Document | KnownLine]:
    for line_no, rec, hashed in records:
        if isinstance(rec, KnownLine):
            yield rec
            continue
        where = f"{path}:{line_no}"
        if not isinstance(rec, dict):
            errors.append(SourceError(where, "record is not an object"))
            continue
        text = rec.get("text")
        key = rec.get("id") if rec.get("id") not in (None, "") else rec.get("title")
        if key in (None, ""):
            errors.append(SourceError(where, "record has neither 'id' nor 'title'"))
            continue
        if not isinstance(text, str) or not text.strip():
            errors.append(SourceError(where, f"record {key!r} has no text"))
            continue
        broken = [(f, why) for f, v in (("id", key), ("title", rec.get("title")), ("text", text)) if (why := _unencodable(v))]
        if broken:
            field_name, why = broken[0]
            errors.append(SourceError(where, f"record {key!r}: its {field_name} is not valid Unicode ({why}); fix the record's \\u escapes"))
            continue
        metadata = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {
            k: v for k, v in rec.items() if k not in ("id", "title", "text") and _jsonable(v)
        }
        yield Document(
            source_key=str(key),
            source=str(path),
            title=str(rec.get("title") or key),
            text=text,
            metadata=metadata,
            line_hash=hashed,
        )


def _unencodable(value) -> str | None:
    """What makes a string impossible to store as UTF-8 (a lone surrogate such as JSON's
    "\\ud800"), or None."""
    if not isinstance(value, str):
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate \\u{ord(value[exc.start]):04x} at character {exc.start}"
    return None


def _jsonable(value) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _jsonl_records(path: Path, errors: list[SourceError], known: dict[bytes, tuple[str, str]] | None = None
                   ) -> Iterator[tuple[int, dict | KnownLine, bytes | None]]:
    """(line number, record, its line_hash) of each line; with `known` ({line_hash: (doc_id,
    source_key)} of the lines the last ingest read, None where lines are not recorded), every
    line is hashed and a known one is a KnownLine, not parsed. A line that starts with a
    byte-order mark is neither (one is dropped from the first line alone, and is an error on any
    other); without one, a line decodes alike wherever it stands."""
    # read a MB at a time: the lines of a 106 MB file took 0.07-0.11 s in 8 kB reads, 0.02 s so
    with (path.open("rb", buffering=1 << 20) if isinstance(path, Path) else path.open("rb")) as fh:
        for line_no, raw in enumerate(fh, start=1):
            if line_no == 1 and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
                raise ValueError("UTF-16 text (it starts with a UTF-16 byte-order mark); JSONL must be UTF-8: convert it")
            if not raw.strip():
                continue
            hashed = line_hash(raw) if known is not None and not raw.startswith(BOM) else None
            if hashed is not None and hashed in known:
                doc_id, source_key = known[hashed]
                yield line_no, KnownLine(doc_id, source_key, str(path), hashed), hashed
                continue
            try:
                yield line_no, json.loads(raw.decode("utf-8-sig" if line_no == 1 else "utf-8")), hashed
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                errors.append(SourceError(f"{path}:{line_no}", f"invalid JSON line: {exc}"))


def _parquet_records(path: Path) -> Iterator[tuple[int, dict]]:
    import pyarrow.parquet as pq

    row = 0
    with path.open("rb") as fh:
        parquet = pq.ParquetFile(fh)
        columns = parquet.schema_arrow
        missing = [c for c in ("text",) if c not in columns.names] + ([] if {"id", "title"} & set(columns.names) else ["id (or title)"])
        if missing:  # one message for the file, not one per row
            raise ValueError(f"no {' and no '.join(repr(c) if c == 'text' else c for c in missing)} column (it has: "
                             f"{', '.join(columns.names) or 'none'}); a Parquet source needs a text column and an id or title column")
        if not (pa.types.is_string(columns.field("text").type) or pa.types.is_large_string(columns.field("text").type)):
            raise ValueError(f"its 'text' column holds {columns.field('text').type}, not strings")
        for batch in parquet.iter_batches(batch_size=4096):
            for rec in batch.to_pylist():
                row += 1
                yield row, rec


class ObjectFile:
    """An object on an object store, with the parts of Path's interface that read_path uses."""

    def __init__(self, store, base: str, key: str):
        self.store, self.key, self.uri = store, key, f"{base}/{key}"
        pure = PurePosixPath(key)
        self.name, self.stem, self.suffix = pure.name, pure.stem, pure.suffix

    def read_bytes(self) -> bytes:
        import obstore
        from obstore.exceptions import BaseError

        try:
            return bytes(obstore.get(self.store, self.key).bytes())
        except BaseError as exc:  # read_path records OSErrors against the file
            raise OSError(f"cannot read {self.uri}: {str(exc).splitlines()[0]}") from exc

    def open(self, mode: str = "rb") -> io.BytesIO:
        return io.BytesIO(self.read_bytes())

    def __str__(self) -> str:
        return self.uri


def _object_sources(uri: str) -> list[tuple[ObjectFile, str]]:
    """(file, source key) for an object URI, a prefix (keys relative to it) or a glob (keys
    relative to the folder before the first wildcard; `*` also matches across `/`)."""
    import obstore
    from obstore.exceptions import NotFoundError

    scheme, _, rest = uri.partition("://")
    bucket, _, path = rest.partition("/")
    base = f"{scheme}://{bucket}"
    store = location.open_store(base, location.storage_options())
    wildcards = [i for i in (path.find(c) for c in "*?[") if i >= 0]
    if wildcards:
        folder = path[: path.rfind("/", 0, min(wildcards)) + 1]
    else:
        if path and not path.endswith("/"):
            try:
                obstore.head(store, path)
                return [(ObjectFile(store, base, path), PurePosixPath(path).name)]
            except (NotFoundError, FileNotFoundError):
                pass
        folder = path.rstrip("/") + "/" if path else ""
    listed = [meta["path"] for batch in obstore.list(store, folder.rstrip("/") or None) for meta in batch]
    keys = [k for k in listed if fnmatch.fnmatchcase(k, path)] if wildcards else listed
    keys = [k for k in sorted(keys) if not any(part.startswith(".") for part in k[len(folder):].split("/"))]
    return [(ObjectFile(store, base, k), k[len(folder):]) for k in keys]


MAX_ERRORS_PER_FILE = 50


def read_path(path: Path, source_key: str, errors: list[SourceError], failed: set[str],
              known_lines: dict[bytes, tuple[str, str]] | None = None) -> Iterator[Document | KnownLine]:
    """Documents from one file; problems go to `errors` (and `failed` when the whole file is lost).
    `known_lines`: a JSONL file's lines the last ingest read (_jsonl_records)."""
    suffix = path.suffix.lower()
    errors_before = len(errors)
    try:
        if suffix in TEXT_SUFFIXES:
            yield _read_text_file(path, source_key)
        elif suffix in JSONL_SUFFIXES:
            yield from _record_documents(path, _jsonl_records(path, errors, known_lines), errors)
        elif suffix == ".parquet":
            yield from _record_documents(path, ((n, rec, None) for n, rec in _parquet_records(path)), errors)
        else:
            errors.append(SourceError(str(path), f"unsupported file type {suffix or '(none)'}; expected .txt, .md, .jsonl or .parquet"))
    except (OSError, ValueError, pa.ArrowException) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        errors.append(SourceError(str(path), reason))
        failed.add(str(path))
    if len(errors) > errors_before:
        # a record we could not read may be one already indexed: keep this file's documents
        failed.add(str(path))
    if len(errors) - errors_before > MAX_ERRORS_PER_FILE:  # a broken export must not bury the other messages
        more = len(errors) - errors_before - MAX_ERRORS_PER_FILE
        del errors[errors_before + MAX_ERRORS_PER_FILE:]
        errors.append(SourceError(str(path), f"{more} more problems in this file (the first {MAX_ERRORS_PER_FILE} are listed)"))


def read_sources(sources: list[str | Path]) -> SourceBatch:
    """Read every source into Document objects (document_tables reads a corpus too large to hold
    as Python objects). Folder members are keyed by their path relative to the folder."""
    errors: list[SourceError] = []
    failed: set[str] = set()
    return SourceBatch(list(iter_documents(sources, errors, failed)), errors, failed)


# Documents turned into Arrow rows together: a few MB of Python objects at a time.
TABLE_BATCH_DOCUMENTS = 1000


def document_tables(sources: list[str | Path], run_id: str, errors: list[SourceError], failed: set[str],
                    reuse=None) -> Iterator[pa.Table]:
    """The documents table of every source, TABLE_BATCH_DOCUMENTS rows at a time, so the corpus
    is never held as Python objects: at 100k documents (1.1 GB of text) they and their table had
    taken the ingest stage to 4.5 GB. Problems go to `errors` and `failed` as they are met; files
    `reuse` (a quick_check.QuickCheck) takes from the index are not read."""
    pending = []
    for doc in iter_documents(sources, errors, failed, reuse):
        pending.append(doc)
        if len(pending) == TABLE_BATCH_DOCUMENTS:
            yield documents_table(pending, run_id)
            pending = []
    if pending:
        yield documents_table(pending, run_id)


def iter_documents(sources: list[str | Path], errors: list[SourceError], failed: set[str], reuse=None) -> Iterator[Document]:
    """Every source's documents, in order; problems go to `errors` (and `failed`). A key seen
    before is an error naming both files, and the first document is kept; a record whose id is
    also a text file's key (its path relative to its folder) is refused and the file's
    document kept, whichever is read first. A file `reuse` knows unchanged, whose keys meet none
    of these, is taken from the index (reuse.accept) instead of read; in a JSONL file that
    changed, so is each line it knows byte for byte (reuse.take_line)."""
    keyed = [pair for source in sources for pair in _source_files(source, errors, failed)]
    file_keys = {key: str(path) for path, key in keyed if path.suffix.lower() in TEXT_SUFFIXES}
    first_source: dict[str, str] = {}  # source key -> the file it was read from
    for path, key in keyed:
        is_record = path.suffix.lower() in RECORD_SUFFIXES
        known = reuse.keys(path, key) if reuse is not None else None
        if known is not None and not any(k in first_source or (is_record and k in file_keys) for k in known):
            first_source.update(dict.fromkeys(known, str(path)))
            reuse.accept(path)
            continue
        for doc in read_path(path, key, errors, failed, reuse.lines(path) if reuse is not None else None):
            if is_record and doc.source_key in file_keys:
                errors.append(SourceError(doc.source, f"record id {doc.source_key!r} is also the path of the file "
                                                      f"{file_keys[doc.source_key]}: both would be document {doc.source_key!r}; "
                                                      "the file's document is kept: give the record another id"))
                failed.add(doc.source)
                continue
            if doc.source_key in first_source:
                other = first_source[doc.source_key]
                errors.append(SourceError(doc.source, f"duplicate document key {doc.source_key!r} (also in {other}); kept the first"))
                continue
            first_source[doc.source_key] = doc.source
            if isinstance(doc, KnownLine):
                reuse.take_line(doc)
                continue
            if doc.line_hash is not None:
                reuse.note_line(doc.source, doc.doc_id, doc.line_hash)
            yield doc


def _source_files(source: str | Path, errors: list[SourceError], failed: set[str]) -> list[tuple]:
    """(file, source key) of one source: an object-store URI, a folder or a file."""
    if location.is_uri(str(source)):
        from obstore.exceptions import BaseError

        try:
            keyed = _object_sources(str(source))
        except BaseError as exc:  # unreachable store, missing bucket, no permission
            keyed, reason = [], f"cannot list: {str(exc).splitlines()[0]}"
        else:
            reason = "no such object, prefix or matching objects"
        if not keyed:
            errors.append(SourceError(str(source), reason))
            failed.add(str(source))
        return keyed
    root = Path(source)
    if root.is_dir():
        def report(path: Path, reason: str) -> None:
            errors.append(SourceError(str(path), reason))
            failed.add(str(path))

        return [(p, p.relative_to(root).as_posix()) for p in folder_files(root, report)]
    if root.exists():
        return [(root, root.name)]
    errors.append(SourceError(str(root), "dangling symlink: its target does not exist" if root.is_symlink() else "no such file or directory"))
    failed.add(str(root))
    return []


def documents_table(docs: list[Document], run_id: str) -> pa.Table:
    return pa.table(
        schema=contracts.schema("documents").arrow,  # typed even when empty
        data={
            "doc_id": [d.doc_id for d in docs],
            "source_key": [d.source_key for d in docs],
            "source": [d.source for d in docs],
            "title": [d.title for d in docs],
            "text": [d.text for d in docs],
            "content_hash": [ids.content_hash(d.text) for d in docs],
            "metadata": [json.dumps(d.metadata, sort_keys=True) if d.metadata else None for d in docs],
            "n_chars": [len(d.text) for d in docs],
            "run_id": [run_id] * len(docs),
        }
    )
