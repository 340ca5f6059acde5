"""Embed: the lexical (BM25) indexes of an index (engines.lexical), one per kind:

- chunk: the document's title and the chunk's text; stores the text, its tokens, doc_id, title and source key;
- entity: its name and aliases; stores name, type, description, degree, chunk count and the first
  chunk and document ids;
- relationship: its description (the "fact" a question is matched to; one without a description
  states nothing and matches nothing); stores the relationship row, its lists cut the same way;
- report: a community report's text; stores its level, title, summary, rating and text.

Each is brought from the published version's index to the current tables by deleting what was
removed or changed and adding what is new or changed (matched by a hash of each item's indexed
and stored text), so an update costs what changed, not the index's size. The stored rows let a
query fetch its evidence by id without scanning a Delta table.
"""

from __future__ import annotations

import hashlib
import os
import json
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.engines import lexical
from graphwright.storage import manifest
from graphwright.storage.delta import IndexStore

KINDS = ("chunk", "entity", "relationship", "report")
LIST_ITEMS = 10  # ids kept in a stored row's chunk_ids / doc_ids (what the query modes return)


def manifest_key(kind: str) -> str:
    return f"lexical:{kind}"


def write_lexical_indexes(store: IndexStore, cfg) -> dict[str, str]:
    """Version file of each kind's lexical index (manifest key -> path), built or updated."""
    if cfg.search_index.lexical == "none":
        return {}
    try:
        published = manifest.load_manifest(store)["vector_indexes"]
    except manifest.NoPublishedVersion:
        published = {}
    threads = min(4, cfg.execution.driver_processes or os.cpu_count() or 1)
    return {manifest_key(kind): write_kind(store, kind, published.get(manifest_key(kind)), threads) for kind in KINDS}


def write_kind(store: IndexStore, kind: str, previous: str | None, threads: int = 1) -> str:
    from graphwright.engines.lexical.tantivy_engine import ANALYZER_VERSION

    hashes = [(b.column("item_id"), _row_hashes(b)) for b in _batches(store, kind)]
    items = pa.table({"item_id": pa.chunked_array([h[0] for h in hashes] or [pa.array([], pa.string())], pa.string()),
                      "row_hash": pa.chunked_array([h[1] for h in hashes] or [pa.array([], pa.string())], pa.string())})
    del hashes
    items = items.sort_by("item_id")
    digest = ids.stable_id_of("lexical", (ANALYZER_VERSION, kind, *_keys(items).to_pylist()), length=16)
    relative = lexical.version_path(kind, digest)
    if store.files.exists(relative):
        return relative
    before = lexical.previous_items(store.files, previous)
    if before is None:
        previous, deletes, wanted = None, [], None
    else:
        old, new = _keys(before), _keys(items)
        kept = pc.is_in(old, value_set=new)
        deletes = before.column("item_id").filter(pc.invert(kept)).to_pylist()  # removed or changed
        wanted = items.column("item_id").filter(pc.invert(pc.is_in(new, value_set=old)))  # new or changed
    docs = _docs(store, kind, wanted)
    return lexical.write_version(store.files, kind, digest, previous, deletes, docs, items, threads)


def _keys(items: pa.Table) -> pa.Array:
    return pc.binary_join_element_wise(items.column("item_id"), items.column("row_hash"), "\x1f").combine_chunks()


def _docs(store: IndexStore, kind: str, wanted: pa.ChunkedArray | None) -> Iterator[tuple[str, str, bytes]]:
    """(item id, body, stored row as JSON) of the items `wanted` (None: all)."""
    value_set = wanted.combine_chunks() if wanted is not None else None
    for batch in _batches(store, kind):
        if value_set is not None:
            batch = batch.filter(pc.is_in(batch.column("item_id"), value_set=value_set))
        row_columns = [c for c in batch.column_names if c not in ("item_id", "body")]
        rows = batch.select(row_columns).to_pylist()
        for item_id, body, row in zip(batch.column("item_id").to_pylist(), batch.column("body").to_pylist(), rows):
            yield item_id, body, json.dumps(row, ensure_ascii=False).encode()


def _row_hashes(batch: pa.Table) -> pa.Array:
    """A hash of each item's body and stored columns (text joined column-wise, not row objects)."""
    parts = []
    for name in batch.column_names:
        if name == "item_id":
            continue
        column = batch.column(name)
        if pa.types.is_list(column.type):
            column = pc.binary_join(column, "\x1e")
        parts.append(pc.fill_null(column.cast(pa.string()), "\x00"))
    joined = pc.binary_join_element_wise(*parts, "\x1f").to_pylist()
    return pa.array([hashlib.blake2b(t.encode(), digest_size=12).hexdigest() for t in joined], pa.string())


def _batches(store: IndexStore, kind: str) -> Iterator[pa.Table]:
    """The kind's items a batch at a time: item_id, body (what BM25 searches), stored columns."""
    if kind == "chunk":
        docs = store.read("documents", columns=["doc_id", "title", "source_key"])
        doc_keys = docs.column("doc_id").combine_chunks()
        for batch in store.scanner("chunks")(["chunk_id", "doc_id", "text", "n_tokens"]):
            at = pc.index_in(batch.column("doc_id"), value_set=doc_keys)
            title, key = docs.column("title").take(at), docs.column("source_key").take(at)
            title = pc.fill_null(title, "")
            yield pa.table({"item_id": batch.column("chunk_id"),
                            "body": pc.binary_join_element_wise(title, batch.column("text"), "\n"),
                            "doc_id": batch.column("doc_id"), "text": batch.column("text"), "n_tokens": batch.column("n_tokens"),
                            "title": title, "source_key": pc.fill_null(key, "")})
    elif kind == "entity":
        aliases = store.read("entity_aliases", columns=["entity_id", "alias"]).group_by("entity_id").aggregate([("alias", "list")])
        alias_keys = aliases.column("entity_id").combine_chunks()
        columns = ["entity_id", "name", "type", "description", "degree", "chunk_ids", "doc_ids"]
        for batch in store.scanner("entities")(columns):
            names = pc.fill_null(pc.binary_join(aliases.column("alias_list").take(pc.index_in(batch.column("entity_id"), value_set=alias_keys)), " ; "), "")
            yield pa.table({"item_id": batch.column("entity_id"),
                            "body": pc.binary_join_element_wise(batch.column("name"), names, " ; "),
                            "name": batch.column("name"), "type": batch.column("type"), "description": batch.column("description"),
                            "degree": batch.column("degree"), "n_chunks": pc.list_value_length(batch.column("chunk_ids")),
                            "chunk_ids": pc.list_slice(batch.column("chunk_ids"), 0, LIST_ITEMS),
                            "doc_ids": pc.list_slice(batch.column("doc_ids"), 0, LIST_ITEMS)})
    elif kind == "relationship":
        columns = ["relationship_id", "source_id", "target_id", "source", "target", "description", "weight", "chunk_ids", "doc_ids"]
        for batch in store.scanner("relationships")(columns):
            yield pa.table({"item_id": batch.column("relationship_id"),
                            "body": batch.column("description"),
                            **{c: batch.column(c) for c in ("source_id", "target_id", "source", "target", "description", "weight")},
                            "n_chunks": pc.list_value_length(batch.column("chunk_ids")),
                            "chunk_ids": pc.list_slice(batch.column("chunk_ids"), 0, LIST_ITEMS),
                            "doc_ids": pc.list_slice(batch.column("doc_ids"), 0, LIST_ITEMS)})
    elif kind == "report":
        columns = ["community_id", "level", "title", "summary", "rating", "full_content"]
        for batch in store.scanner("community_reports")(columns):
            yield pa.table({"item_id": batch.column("community_id"), "body": batch.column("full_content"),
                            **{c: batch.column(c) for c in columns[1:]}})
    else:
        raise ValueError(f"no lexical index for {kind!r}")
