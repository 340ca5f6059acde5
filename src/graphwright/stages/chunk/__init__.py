"""Chunk stage: cut documents into chunks by tokens of the embedder's own tokenizer
(graphwright.text.tokens), at content-defined sentence boundaries, so that an inserted paragraph
changes about two chunk ids instead of every later one. Documents whose current content hash has
no chunks are chunked; chunks of deleted or superseded versions are removed."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.pipeline.executors import BatchStage, pool_of
from graphwright.pipeline.stage import Stage, Where
from graphwright.stages.chunk.plan import ANCHOR_EVERY, plan_chunks, split_spans  # noqa: F401  (re-exported)
from graphwright.storage import contracts
from graphwright.storage.delta import IndexStore
from graphwright.storage.patch import patch_table
from graphwright.text.tokens import whole_spans

DOCUMENTS_PER_BATCH = 8  # documents vary in length far more than chunks: small batches spread the work


def chunk_text(doc_id: str, text: str, size: int, overlap: int, min_tokens: int | None = None,
               spans: list[tuple[int, int]] | None = None) -> list[dict]:
    """The chunk rows of one document (stages.chunk.plan: tokenized in windows, so a huge
    document's memory stays bounded; `spans`: its token spans, if known)."""
    rows, seen = [], {}
    min_tokens = (2 * size) // 3 if min_tokens is None else min_tokens
    for index, (first, end, start_char, end_char) in enumerate(plan_chunks(text, size, overlap, min_tokens, spans=spans)):
        piece = text[start_char:end_char]
        occurrence = seen.get(piece, 0)
        seen[piece] = occurrence + 1
        rows.append(
            {
                "chunk_id": ids.chunk_id(doc_id, piece, occurrence),
                "doc_id": doc_id,
                "chunk_index": index,
                "text": piece,
                "n_tokens": end - first,
                "start_char": start_char,
                "end_char": end_char,
            }
        )
    return rows


class Chunker:
    """Batch function: documents (doc_id, content_hash, text) -> chunks with their doc_hash."""

    def __init__(self, size_tokens: int, overlap_tokens: int, min_tokens: int | None = None):
        self.size, self.overlap, self.min_tokens = size_tokens, overlap_tokens, min_tokens

    def __call__(self, docs: pa.Table) -> pa.Table:
        rows = []
        texts = docs.column("text").to_pylist()
        # the batch's documents tokenized together, on the tokenizer's threads (1,500 documents
        # of the 1.2M corpus in batches of 8: 8.6-11.3 s with one `encode` each, 7.5-8.1 s)
        spans = whole_spans(texts)
        for did, dhash, text, known in zip(docs.column("doc_id").to_pylist(), docs.column("content_hash").to_pylist(), texts, spans):
            for row in chunk_text(did, text, self.size, self.overlap, self.min_tokens, known):
                row["doc_hash"] = dhash
                rows.append(row)
        return pa.Table.from_pylist(rows, schema=contracts.schema("chunks").arrow)


def execute(run, m: dict) -> dict:
    store, cfg = run.store, run.config
    docs = store.read("documents", columns=["doc_id", "content_hash"])
    chunks = store.read("chunks", columns=["chunk_id", "doc_id", "doc_hash"])
    # (document, content hash) pairs matched by Arrow's hash joins: the documents no chunk was
    # cut from, and below the chunks no document now has (1.2M chunks: 0.13-0.38 s for both,
    # where the pairs joined as strings and looked up took 0.15-0.74 s, Python sets seconds)
    todo = sorted(chunks.join(docs, ["doc_id", "doc_hash"], ["doc_id", "content_hash"], join_type="right anti").column("doc_id").to_pylist())
    written, written_ids = 0, []
    if todo:
        texts = store.rows_in("documents", "doc_id", todo, ["doc_id", "content_hash", "text"])
        stage = BatchStage("chunk", Chunker, (cfg.chunk.size_tokens, cfg.chunk.overlap_tokens, cfg.chunk.min_tokens),
                           batch_size=DOCUMENTS_PER_BATCH, num_cpus=cfg.execution.actor_num_cpus, actors=cfg.execution.actors,
                           weight="text")
        pending: list[pa.Table] = []
        documents_in = lambda batch: len(set(batch.column("doc_id").to_pylist()))
        had_chunks = pc.unique(chunks.column("doc_id").combine_chunks())
        for batch in run.map_batches("chunk", texts, stage, documents_in):
            pending.append(batch)
            if sum(t.num_rows for t in pending) >= cfg.execution.commit_every:
                written += _commit_chunks(store, pending, had_chunks, written_ids)
        written += _commit_chunks(store, pending, had_chunks, written_ids)
    # chunks of deleted documents, or cut from a document version that is gone: found among the
    # rows read before (this run's chunks are of current versions), less the ids written again
    # (a patched-in chunk replaced its row). Reading the table again took 0.6 s at 1.2M chunks.
    stale = chunks.join(docs, ["doc_id", "doc_hash"], ["doc_id", "content_hash"], join_type="left anti").column("chunk_id")
    if written_ids and len(stale):
        stale = stale.filter(pc.invert(pc.is_in(stale, value_set=pa.chunked_array(written_ids).combine_chunks())))
    removed = patch_table(store, "chunks", stale.combine_chunks(), [])["rows_removed"] if len(stale) else 0
    m.update(rows_in=len(todo), rows_out=written, documents_chunked=len(todo), chunks_written=written, chunks_removed=removed,
             work_unit="documents", work_done=len(todo), work_total=docs.num_rows)
    return {"chunked_documents": len(todo), "chunks_written": written, "chunks_removed": removed}


def _commit_chunks(store: IndexStore, pending: list[pa.Table], had_chunks: pa.Array, written_ids: list) -> int:
    """Commit whole documents' chunks. A document that had no chunks is appended; one that had (a
    new version may repeat a chunk id) is patched in: only the files holding its chunk ids are
    rewritten (a MERGE scanned the whole table, texts included: 1.3 GB at 1.2M chunks, and made a
    first load of 1M chunks quadratic). A rerun after a kill skips documents already committed.
    The ids written are added to `written_ids`."""
    if not pending:
        return 0
    table = pa.concat_tables(pending)
    pending.clear()
    written_ids.append(table["chunk_id"].combine_chunks())
    known = pc.is_in(table["doc_id"], value_set=had_chunks)
    store.append("chunks", table.filter(pc.invert(known)))
    if pc.any(known).as_py():
        patch_table(store, "chunks", [], [table.filter(known)])
    return table.num_rows


STAGE = Stage(
    "chunk", reads=("documents", "chunks"), writes=("chunks",), execute=execute,
    where=lambda cfg: Where(f"tokens {cfg.chunk.size_tokens}, overlap {cfg.chunk.overlap_tokens}", pool_of(cfg.execution),
                            f"batches of {DOCUMENTS_PER_BATCH} documents"),
    summary="cut documents into token chunks at content-defined sentence ends",
)
