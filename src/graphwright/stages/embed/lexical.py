"""Embed: the lexical (BM25) indexes of an index (engines.lexical), one per kind:

- chunk: the document's title and the chunk's text; stores the text, its tokens, doc_id, title and source key;
- entity: its name and aliases; stores name, type, description, degree, chunk count and the first
  chunk and document ids;
- relationship: its description (the "fact" a question is matched to; one without a description
  states nothing and matches nothing); stores the relationship row, its lists cut the same way;
- report: a community report's text; stores its level, title, summary, rating and text.

Each is brought from the published version's index to the current tables by deleting what was
removed or changed and adding what is new or changed (matched by a hash of each item's indexed
and stored text). A version records the table versions it was built from, so the next update
reads from the Delta log which rows changed since (storage.changes) and reads and hashes only
those; where the log cannot say, the tables are read whole. The stored rows let a query fetch
its evidence by id without scanning a Delta table.

A deleted document stays in its segment until tantivy merges it away, and BM25 counts it (in the
number of documents, the document frequencies and the average length), so an updated index
scores a little differently from a fresh one. Once the deleted documents would pass
REBUILD_DELETED_SHARE of what the index holds, the update rebuilds the kind's index from the
table instead, as a fresh build makes it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.engines import lexical
from graphwright.stages.embed import item_lists
from graphwright.storage import lineage, manifest
from graphwright.storage.changes import changes_since
from graphwright.storage.delta import IndexStore
from graphwright.storage.diff import as_text, key_column
from graphwright.storage.health import StorageError
from graphwright.util.cores import driver_cores
from graphwright.util.rows import row_dicts

KINDS = ("chunk", "entity", "relationship", "report")
REBUILD_DELETED_SHARE = 0.1  # module docstring
LIST_ITEMS = 10  # ids kept in a stored row's chunk_ids / doc_ids (what the query modes return)
# each kind's table, its key and the columns its items are made of; and the table joined to it
SOURCES = {
    "chunk": ("chunks", "chunk_id", ["chunk_id", "doc_id", "text", "n_tokens"]),
    "entity": ("entities", "entity_id", ["entity_id", "name", "type", "description", "degree", "chunk_ids", "doc_ids"]),
    "relationship": ("relationships", "relationship_id",
                     ["relationship_id", "source_id", "target_id", "source", "target", "description", "weight", "chunk_ids", "doc_ids"]),
    "report": ("community_reports", "community_id", ["community_id", "level", "title", "summary", "rating", "full_content"]),
}
JOINED = {"chunk": ("documents", "doc_id"), "entity": ("entity_aliases", "entity_id")}


def manifest_key(kind: str) -> str:
    return f"lexical:{kind}"


def lexical_work(store: IndexStore, cfg, stats: dict, wanted: Callable[[str], bool] = lambda kind: True
                 ) -> list[tuple[str, str, Callable[[], str]]]:
    """(kind, manifest key, the work that writes its version file and returns its path) for the
    lexical index of each kind `wanted(kind)` accepts, built or updated: independent of each
    other, for any thread to take. `stats` gets, per kind, how its changes were found and how
    many rows were read."""
    if cfg.search_index.lexical == "none":
        return []
    published = manifest.published(store).get("vector_indexes", {})
    threads = min(4, driver_cores(cfg.execution))
    return [(kind, manifest_key(kind), functools.partial(write_kind, store, kind, published.get(manifest_key(kind)), threads,
                                                         stats.setdefault(kind, {})))
            for kind in KINDS if wanted(kind)]


def write_kind(store: IndexStore, kind: str, previous: str | None, threads: int = 1, stats: dict | None = None) -> str:
    from graphwright.engines.lexical.tantivy_engine import ANALYZER_VERSION

    stats = {} if stats is None else stats
    before = lexical.previous_items(store.files, previous)
    changed = _changed(store, kind, lexical.previous_sources(store.files, previous)) if before is not None else None
    if changed is None:  # a first build, or the log cannot say what changed: every row is read
        sources = _versions(store, kind)
        hashes = [(b.column("item_id"), _row_hashes(b)) for b in _batches(store, kind)]
        items = pa.table({"item_id": pa.chunked_array([h[0] for h in hashes] or [pa.array([], pa.string())], pa.string()),
                          "row_hash": pa.chunked_array([h[1] for h in hashes] or [pa.array([], pa.string())], pa.string())})
        items = items.sort_by("item_id")
        del hashes
        stats.update(read="table", rows=items.num_rows)
    else:
        fresh, deleted, sources = changed
        fresh = fresh.append_column("row_hash", _row_hashes(fresh))
        stats.update(read="changes", rows=fresh.num_rows)
        items, fresh, dropped = item_lists.updated(before, fresh, deleted)  # fresh: the new or changed rows, items sorted
    digest = ids.stable_id_of_columns("lexical", (ANALYZER_VERSION, kind), [items.column("item_id"), items.column("row_hash")],
                                      length=16)
    relative = lexical.version_path(kind, digest)
    if store.files.exists(relative):
        return relative
    if before is None:
        previous, deletes, docs = None, [], _docs(_batches(store, kind), None)
    elif changed is None:
        old, new = _keys(before), _keys(items)
        deletes = before.column("item_id").filter(pc.invert(pc.is_in(old, value_set=new))).to_pylist()  # removed or changed
        wanted = items.column("item_id").filter(pc.invert(pc.is_in(new, value_set=old)))  # new or changed
        docs = _docs(_batches(store, kind), wanted)
    else:
        deletes = dropped.to_pylist()
        docs = _docs([fresh.drop_columns(["row_hash"])], None)
    if previous is not None and lexical.deleted_share(store.files, previous, len(deletes), items.num_rows) > REBUILD_DELETED_SHARE:
        stats["rebuilt"] = True  # BM25's statistics as a fresh build's
        previous, deletes, docs = None, [], _docs(_batches(store, kind), None)
    return lexical.write_version(store.files, kind, digest, previous, deletes, docs, items, threads, sources)


def _versions(store: IndexStore, kind: str) -> dict[str, int | None]:
    tables = [SOURCES[kind][0]] + ([JOINED[kind][0]] if kind in JOINED else [])
    return {t: store.version(t) for t in tables}


def _changed(store: IndexStore, kind: str, since: dict | None, codes: bool = True) -> tuple[pa.Table, pa.Array, dict] | None:
    """(items added or changed since the table versions `since`, item ids deleted, the versions
    now), read from the Delta log; None when it cannot say. `codes`: whether the chunk lists'
    heads may come from resolve's codes (_with_chunk_heads)."""
    if not since:
        return None
    table, key, columns = SOURCES[kind]
    coded = lineage.current(store) if codes and "chunk_ids" in columns else None
    if coded is not None:  # the lists' heads and lengths come from resolve's codes: the lists are not read
        columns = [c for c in columns if c != "chunk_ids"]
    changes = changes_since(store, table, since.get(table), key, columns)
    if changes is None:
        return None
    rows, now = [changes.rows], {table: changes.now}
    lookup = _lookup(store, kind)
    if kind in JOINED:
        joined, by = JOINED[kind]
        now[joined] = store.version(joined)
        if now[joined] != since.get(joined):
            try:
                then = _lookup(store, kind, since.get(joined))
            except StorageError:  # that version's files were vacuumed
                return None
            # the items whose joined row (a document's title, an entity's aliases) changed
            moved = _changed_lookup(then, lookup, by)
            if len(moved):
                more = store.rows_in(table, by, moved.to_pylist(), columns).cast(changes.rows.schema)
                # a key that changed itself is there already
                rows.append(more.filter(pc.invert(pc.is_in(more.column(key), value_set=changes.rows.column(key).combine_chunks()))))
    rows = pa.concat_tables(rows)
    if coded is not None:
        rows = _with_chunk_heads(rows, kind, coded)
        if rows is None:  # a row resolve's codes do not hold: its list is read
            return _changed(store, kind, since, codes=False)
    return _items(kind, rows, lookup), changes.deleted, now


def _with_chunk_heads(rows: pa.Table, kind: str, coded) -> pa.Table | None:
    """`rows` (entities or relationships) with the first LIST_ITEMS ids of each chunk list and its
    length (`n_chunks`), from resolve's codes of the lists (storage.lineage), instead of reading
    the lists: the hub rows an update rebuilds at 1.2M chunks hold most of the index's list
    entries (reading the changed entities took 1.0 s, the relationships 0.7 s). None when a row
    is not among the codes."""
    if kind == "entity":
        at, indptr = coded.entity_positions(rows.column("entity_id")), coded.entity_indptr
        chunk_ids = coded.entity_chunk_ids
    else:
        at, indptr = coded.relationship_positions(rows.column("source_id"), rows.column("target_id")), coded.relationship_indptr
        chunk_ids = coded.relationship_chunk_ids
    if (at < 0).any():
        return None
    lengths = indptr[at + 1] - indptr[at]
    heads = chunk_ids(at, LIST_ITEMS)
    return rows.append_column("chunk_ids", heads).append_column("n_chunks", pa.array(lengths, pa.int32()))


def _lookup(store: IndexStore, kind: str, version: int | None = None) -> pa.Table | None:
    """What a kind's items take from their joined table: each document's title and source key,
    or each entity's alias list (at `version`)."""
    if kind == "chunk":
        return store.read("documents", version=version, columns=["doc_id", "title", "source_key"])
    if kind == "entity":
        aliases = store.read("entity_aliases", version=version, columns=["entity_id", "alias"])
        # sorted first and gathered in order, so that a list does not depend on the table's file order
        aliases = aliases.sort_by([("entity_id", "ascending"), ("alias", "ascending")])
        return aliases.group_by("entity_id", use_threads=False).aggregate([("alias", "list")])
    return None


def _changed_lookup(then: pa.Table, now: pa.Table, by: str) -> pa.Array:
    """The keys whose row in `now` is not the same in `then`."""
    def keyed(table: pa.Table) -> pa.Array:
        return pc.binary_join_element_wise(*(as_text(table.column(n)) for n in table.column_names), "\x1f").combine_chunks()

    same = pc.is_in(keyed(now), value_set=keyed(then))
    return now.column(by).filter(pc.invert(same)).combine_chunks()


def _keys(items: pa.Table) -> pa.Array:
    return key_column(items, ("item_id", "row_hash"))


def _docs(tables, wanted: pa.ChunkedArray | None) -> Iterator[tuple[str, str, bytes]]:
    """(item id, body, stored row as JSON) of the items of `tables` that are `wanted` (None: all)."""
    value_set = wanted.combine_chunks() if wanted is not None else None
    for batch in tables:
        if value_set is not None:
            batch = batch.filter(pc.is_in(batch.column("item_id"), value_set=value_set))
        row_columns = [c for c in batch.column_names if c not in ("item_id", "body")]
        rows = row_dicts(batch.select(row_columns))
        for item_id, body, row in zip(batch.column("item_id").to_pylist(), batch.column("body").to_pylist(), rows):
            yield item_id, body, json.dumps(row, ensure_ascii=False).encode()


def _row_hashes(batch: pa.Table) -> pa.Array:
    """A hash of each item's body and stored columns (text joined column-wise, not row objects)."""
    parts = [as_text(batch.column(name)) for name in batch.column_names if name != "item_id"]
    if not batch.num_rows:
        return pa.array([], pa.string())
    joined = pc.binary_join_element_wise(*parts, "\x1f").to_pylist()
    return pa.array([hashlib.blake2b(t.encode(), digest_size=12).hexdigest() for t in joined], pa.string())


def _batches(store: IndexStore, kind: str) -> Iterator[pa.Table]:
    """The kind's items a batch at a time, from its whole table."""
    if kind not in SOURCES:
        raise ValueError(f"no lexical index for {kind!r}")
    table, _, columns = SOURCES[kind]
    lookup = _lookup(store, kind)
    for batch in store.scanner(table)(columns):
        yield _items(kind, batch, lookup)


def _items(kind: str, batch, lookup: pa.Table | None) -> pa.Table:
    """Rows of the kind's table as items: item_id, body (what BM25 searches), stored columns."""
    if kind == "chunk":
        at = pc.index_in(batch.column("doc_id"), value_set=lookup.column("doc_id").combine_chunks())
        title = pc.fill_null(lookup.column("title").take(at), "")
        return pa.table({"item_id": batch.column("chunk_id"),
                         "body": pc.binary_join_element_wise(title, batch.column("text"), "\n"),
                         "doc_id": batch.column("doc_id"), "text": batch.column("text"), "n_tokens": batch.column("n_tokens"),
                         "title": title, "source_key": pc.fill_null(lookup.column("source_key").take(at), "")})
    if kind == "entity":
        at = pc.index_in(batch.column("entity_id"), value_set=lookup.column("entity_id").combine_chunks())
        names = pc.fill_null(pc.binary_join(lookup.column("alias_list").take(at), " ; "), "")
        return pa.table({"item_id": batch.column("entity_id"),
                         "body": pc.binary_join_element_wise(batch.column("name"), names, " ; "),
                         "name": batch.column("name"), "type": batch.column("type"), "description": batch.column("description"),
                         "degree": batch.column("degree"), "n_chunks": _chunk_count(batch),
                         "chunk_ids": pc.list_slice(batch.column("chunk_ids"), 0, LIST_ITEMS),
                         "doc_ids": pc.list_slice(batch.column("doc_ids"), 0, LIST_ITEMS)})
    if kind == "relationship":
        return pa.table({"item_id": batch.column("relationship_id"),
                         "body": batch.column("description"),
                         **{c: batch.column(c) for c in ("source_id", "target_id", "source", "target", "description", "weight")},
                         "n_chunks": _chunk_count(batch),
                         "chunk_ids": pc.list_slice(batch.column("chunk_ids"), 0, LIST_ITEMS),
                         "doc_ids": pc.list_slice(batch.column("doc_ids"), 0, LIST_ITEMS)})
    columns = SOURCES["report"][2]
    return pa.table({"item_id": batch.column("community_id"), "body": batch.column("full_content"),
                     **{c: batch.column(c) for c in columns[1:]}})


def _chunk_count(batch) -> pa.Array:
    """Each row's chunk list length: given (_with_chunk_heads), or counted from its list."""
    return batch.column("n_chunks") if "n_chunks" in batch.schema.names else pc.list_value_length(batch.column("chunk_ids"))
