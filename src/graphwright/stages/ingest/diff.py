"""Ingest: what changed between the documents read now and the documents indexed, by doc_id and
content hash (plain functions over Arrow tables)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


@dataclass
class DocumentDiff:
    new: list[str]
    changed: list[str]  # content changed
    unchanged: list[str]  # content unchanged (includes `relabeled`)
    deleted: list[str]
    relabeled: list[str] = field(default_factory=list)  # same content; source, title or metadata changed

    def as_counts(self) -> dict[str, int]:
        return {k: len(v) for k, v in vars(self).items()}


_LABELS = ("source", "title", "metadata")


def diff_documents(
    incoming: pa.Table, indexed: pa.Table, *, mirror: bool, protected_sources: set[str] = frozenset()
) -> DocumentDiff:
    """Compare incoming documents with the indexed ones by doc_id and content hash.

    In mirror mode, indexed documents absent from the input are deleted, except those read from
    a source that failed to read this time (an unreadable file must not erase its documents).
    `indexed` needs doc_id, content_hash and source; with title and metadata too, documents whose
    labels changed but not their text are reported as relabeled.
    """
    def labels(t: pa.Table) -> dict:
        cols = [c for c in _LABELS if c in t.column_names]
        return dict(zip(t.column("doc_id").to_pylist(), zip(*(t.column(c).to_pylist() for c in cols)))), cols

    old = dict(zip(indexed.column("doc_id").to_pylist(), indexed.column("content_hash").to_pylist()))
    old_source = dict(zip(indexed.column("doc_id").to_pylist(), indexed.column("source").to_pylist()))
    old_labels, cols = labels(indexed)
    new_labels = dict(zip(incoming.column("doc_id").to_pylist(), zip(*(incoming.column(c).to_pylist() for c in cols))))
    new_ids, changed, unchanged, relabeled = [], [], [], []
    seen = set()
    for did, h in zip(incoming.column("doc_id").to_pylist(), incoming.column("content_hash").to_pylist()):
        seen.add(did)
        if did not in old:
            new_ids.append(did)
        elif old[did] != h:
            changed.append(did)
        else:
            unchanged.append(did)
            if old_labels[did] != new_labels[did]:
                relabeled.append(did)
    deleted = []
    if mirror:
        deleted = sorted(d for d in old if d not in seen and old_source[d] not in protected_sources)
    return DocumentDiff(sorted(new_ids), sorted(changed), sorted(unchanged), deleted, sorted(relabeled))


RECORD_SUFFIXES = (".jsonl", ".ndjson", ".parquet")


def kind_collisions(incoming: pa.Table, indexed: pa.Table) -> list[tuple[str, str, str]]:
    """(doc_id, incoming source, indexed source) of incoming documents that would replace an
    indexed one of the other kind: a record whose id is the key of a document read from a text
    file, or a text file whose key is an indexed record's id. An append run must not let one
    displace the other without a word."""
    old_source = dict(zip(indexed.column("doc_id").to_pylist(), indexed.column("source").to_pylist()))
    found = []
    for did, source in zip(incoming.column("doc_id").to_pylist(), incoming.column("source").to_pylist()):
        before = old_source.get(did)
        if before is not None and before != source and _is_record(before) != _is_record(source):
            found.append((did, source, before))
    return found


def _is_record(source: str) -> bool:
    return source.lower().endswith(RECORD_SUFFIXES)
