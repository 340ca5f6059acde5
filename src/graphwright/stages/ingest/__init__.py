"""Ingest stage: read the sources, diff them against `documents` by id and content hash, and
write what is new or changed; in a mirror run, delete what vanished (within
ingest.max_delete_fraction)."""

from __future__ import annotations

import functools
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graphwright.pipeline.errors import NothingToIndex, RefusedDeletion
from graphwright.pipeline.stage import Stage, Where
from graphwright.stages.ingest.diff import diff_documents, kind_collisions
from graphwright.stages.ingest.quick_check import QuickCheck, troubled_sources
from graphwright.stages.ingest.sources import SourceError, document_tables
from graphwright.storage import contracts
from graphwright.storage.delta import IndexStore
from graphwright.storage.diff import exact_keys
from graphwright.storage.parquet_files import write_parquet
from graphwright.storage.patch import patch_table


def execute(run, m: dict) -> dict:
    sources, mirror, force = run.request.sources, run.request.mirror, run.request.force
    schema = contracts.schema("documents")
    with tempfile.TemporaryDirectory(prefix="graphwright-ingest-") as folder:
        columns = ["doc_id", "content_hash", "source", "title", "metadata"]  # what the diff compares
        indexed = run.store.read("documents", columns=[*columns, "source_key"])
        quick = QuickCheck.load(run.store, indexed, run.config.ingest.quick_check)
        indexed = indexed.select(columns)
        errors: list[SourceError] = []
        failed_sources: set[str] = set()
        # the documents are spilled a part at a time and only the columns the diff needs are
        # kept: the text is never whole in memory (at 100k documents, 1.1 GB of it). A document
        # read exactly as it is indexed is not spilled: the diff finds nothing to write for it.
        # Looked up by id in a dict made once, when the first part is read: an Arrow set lookup
        # per part of 1,000 documents hashed the whole index each time (0.5 s a 1.2M-chunk update
        # whose one edited file was read, 5 s when all 100k documents are read), and a run that
        # reads no file (0.19 s at 100k documents) makes none
        @functools.cache
        def as_indexed() -> dict[str, str]:
            return dict(zip(indexed.column("doc_id").to_pylist(), exact_keys(indexed, tuple(columns)).to_pylist()))

        files, kept, spilled = [], [], []  # per spilled file: (path, rows) and its doc ids; every row's diff columns
        parts = document_tables(sources, run.run_id, errors, failed_sources, reuse=quick)
        for i, part in enumerate(parts):
            part = schema.validate(part)
            kept.append(part.select(columns))
            if indexed.num_rows:
                part = part.filter(pa.array([as_indexed().get(doc_id) != key for doc_id, key in
                                             zip(part.column("doc_id").to_pylist(), exact_keys(part, tuple(columns)).to_pylist())], pa.bool_()))
            if part.num_rows:
                files.append((f"{folder}/{i:06d}.parquet", part.num_rows))
                write_parquet(part, files[-1][0])
                spilled.append(part.column("doc_id"))
        taken = quick.accepted_rows(columns)  # unchanged files: their indexed rows, unread
        incoming = pa.concat_tables([contracts.empty("documents").select(columns), *kept, taken])
        if not mirror and indexed.num_rows:
            incoming = _without_collisions(incoming, indexed, errors)
        for err in errors:
            run.log(f"[yellow]skipped[/] {err.source}: {err.reason}")
        if errors:
            reasons: dict[str, list[str]] = {}
            for e in errors:  # one row per source: a file can have several problems
                reasons.setdefault(e.source, []).append(e.reason)
            run.store.upsert("source_errors", pa.Table.from_pylist(
                [{"run_id": run.run_id, "source": s, "reason": "; ".join(r)} for s, r in reasons.items()]))
        if not incoming.num_rows:
            raise NothingToIndex(
                f"no document could be read from {', '.join(map(str, sources))}"
                + (f" ({len(errors)} problem{'s' if len(errors) > 1 else ''}, listed above)" if errors else "")
            )
        diff = diff_documents(incoming, indexed, mirror=mirror, protected_sources=failed_sources)
        limit = run.config.ingest.max_delete_fraction
        share = deleted_share(run.store, diff.deleted, indexed.num_rows)
        if diff.deleted and not force and share > limit:
            raise RefusedDeletion(
                f"this run would delete {len(diff.deleted)} of the {indexed.num_rows} indexed documents "
                f"({share:.0%} of the indexed text), above ingest.max_delete_fraction={limit:g}, because "
                f"they are missing from {', '.join(map(str, sources))}. Pass --force if that is intended, "
                f"or --append to add documents without deleting any"
            )
        write = set(diff.new) | set(diff.changed) | set(diff.relabeled)
        if not indexed.num_rows:  # a first load: every document is new, the files join the table as they are
            run.store.append_files("documents", files)
        elif write or diff.deleted:
            # read back only the spilled files that hold a document to write; one patch writes them
            # and removes the deleted ones, rewriting only the files that hold either (a MERGE read
            # every document's text: 1.1 GB at 100k documents)
            wanted = pa.array(sorted(write), pa.string())
            holding = [path for (path, _), keys in zip(files, spilled) if pc.any(pc.is_in(keys, value_set=wanted)).as_py()]
            patch_table(run.store, "documents", pa.array(sorted(diff.deleted), pa.string()),
                        [t.filter(pc.is_in(t.column("doc_id"), value_set=wanted)) for t in map(pq.read_table, holding)])
        recorded = quick.save(run.store, incoming, troubled_sources(errors, failed_sources))
        m.update(rows_in=incoming.num_rows, rows_out=len(write), **diff.as_counts(), source_errors=len(errors),
                 files_unread=len(quick.accepted), lines_unread=len(quick.taken), files_recorded=recorded,
                 work_unit="documents", work_done=incoming.num_rows, work_total=incoming.num_rows)
        return {"diff": diff.as_counts(), "errors": [vars(e) for e in errors]}


def _without_collisions(incoming: pa.Table, indexed: pa.Table, errors: list[SourceError]) -> pa.Table:
    """The incoming documents less those that would displace an indexed document of the other
    kind (diff.kind_collisions), each reported naming both sources."""
    collisions = kind_collisions(incoming, indexed)
    for doc_id, source, before in collisions:
        errors.append(SourceError(source, f"document {doc_id} has the key of the document indexed from {before}, which it would "
                                          "replace; kept the indexed one. Give the record another id, or delete the indexed "
                                          "document first (graphwright delete --doc-id KEY)"))
    if not collisions:
        return incoming
    refused = pa.array(sorted({d for d, _, _ in collisions}), pa.string())
    return incoming.filter(pc.invert(pc.is_in(incoming.column("doc_id"), value_set=refused)))


def deleted_share(store: IndexStore, deleted: list[str], n_indexed: int) -> float:
    """The larger of the deleted share of documents and of indexed characters (deleting one
    huge document out of two is not 'half' the index)."""
    if not deleted or not n_indexed:
        return 0.0
    sizes = store.read("documents", columns=["doc_id", "n_chars"])
    total = sum(sizes.column("n_chars").to_pylist()) or 1
    gone = set(deleted)
    chars = sum(n for d, n in zip(sizes.column("doc_id").to_pylist(), sizes.column("n_chars").to_pylist()) if d in gone)
    return max(len(deleted) / n_indexed, chars / total)


STAGE = Stage(
    "ingest", reads=("sources", "documents"), writes=("documents", "source_errors"), execute=execute,
    where=lambda cfg: Where("files / JSONL / Parquet / Delta"),
    summary="read the sources; diff against documents by id and content hash",
)
