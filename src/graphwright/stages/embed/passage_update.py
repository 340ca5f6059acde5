"""Embed: an update's passage graph mentions and chunk nodes, from the published version's graph
and what the Delta log says changed since it was built, instead of from every entity's chunk
list (at 1.2M chunks those lists are 9.6M ids, read and coded again by every update) and every
chunk id (1.2M, read and sorted again).

An entity's mention edges are its chunk list. Its edges in the published graph stand while its
row is unchanged (a patch moves unchanged rows to new files without a data change, which the log
tells apart); the entities added or changed since give their lists again, and those deleted
give none. The old node numbers are carried to the new ones by binary search in the sorted ids.
Relationship and synonym edges are read whole, as a build reads them. The graph built from
the result equals one built from the tables, array for array."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.stages.embed.passage_graph import FORMAT, MANIFEST_KEY, MENTION, TABLES, Mentions, _codes, _fixed, graph_path
from graphwright.storage.changes import changes_since
from graphwright.util.numeric import fixed_bytes, sorted_index


def known_mentions(store, entity_keys: pa.Array, chunk_keys: pa.Array, stats: dict) -> Mentions | None:
    """The mention edges without reading every entity's chunk list: from resolve's codes
    (coded_mentions), else from the published graph and the entities changed since
    (updated_mentions); None when neither can say. `stats["passage_graph"]` gets which."""
    from graphwright.storage import manifest

    mentions, how = coded_mentions(store, entity_keys, chunk_keys), "lineage"
    if mentions is None:
        mentions, how = updated_mentions(store, manifest.published(store), entity_keys, chunk_keys), "changes"
    if mentions is not None:
        stats["passage_graph"] = how
    return mentions


def coded_mentions(store, entity_keys: pa.Array, chunk_keys: pa.Array) -> Mentions | None:
    """(entity node, chunk code) of every mention edge, from resolve's codes of the chunk lists
    (storage.lineage) when they are of the tables now: no list is read or looked up; else None."""
    from graphwright.storage import lineage

    coded = lineage.current(store)
    if coded is None:
        return None
    owner, codes = coded.entity_items()
    entity_at = sorted_positions(coded.entity_ids, entity_keys)
    chunk_at = sorted_positions(coded.chunk_ids, chunk_keys)
    # None: resolve's sorted ids are the graph's, so its codes already are the node numbers
    # (int64 like the other paths', and copies: the lineage's arrays are cached)
    return (owner.astype(np.int64) if entity_at is None else entity_at[owner],
            codes.astype(np.int64) if chunk_at is None else chunk_at[codes])


def sorted_positions(ids: pa.Array, keys: pa.Array) -> np.ndarray | None:
    """Each of `ids`' position in the sorted `keys` (-1 where absent); None when `ids` are
    `keys`, so that codes into them are the positions (resolve's entity ids are the entities
    table's; its chunk ids may hold chunks since removed). Ids of one length are found by binary
    search instead of a hash table of the keys (1.2M chunk ids: 0.11 s against 0.35 s)."""
    if ids.equals(keys):
        return None
    cut_ids, cut_keys = fixed_bytes(ids), fixed_bytes(keys)
    if cut_ids is None or cut_keys is None or cut_ids.dtype != cut_keys.dtype:
        return _codes([ids], keys)
    return sorted_index(cut_keys, cut_ids)


def updated_chunk_keys(store, published: dict) -> pa.Array | None:
    """The chunk ids, sorted (passage_graph.node_keys's), from the published graph's and the
    chunks the Delta log added and deleted since it was built, merged by binary search instead
    of read and sorted whole (at 1.2M chunks 1.1 s of an update's embed); None when there is no
    such graph, its ids are not all of one length, or the log cannot say. Only the graph's
    meta.json and chunk ids are read (from an object store too)."""
    previous = published.get("vector_indexes", {}).get(MANIFEST_KEY)
    if not previous:
        return None
    try:
        meta = json.loads(store.files.read_bytes(previous))
        ids = np.load(io.BytesIO(store.files.read_bytes(f"{previous.rsplit('/', 1)[0]}/chunk_ids.npy")))
    except Exception:  # noqa: BLE001 - gone (retention) or unreadable: read from the table
        return None
    width = ids.dtype.itemsize
    if meta.get("format") != FORMAT or not meta.get("versions") or ids.dtype.kind != "S" or not len(ids) \
            or not np.all(ids.view(np.uint8).reshape(-1, width)[:, -1]):  # ids of several lengths, padded
        return None
    changes = changes_since(store, "chunks", meta["versions"].get("chunks"), "chunk_id", ["chunk_id"])
    if changes is None:
        return None
    gone, added = fixed_bytes(changes.deleted), fixed_bytes(changes.rows.column("chunk_id"))
    if gone is None or added is None or any(len(a) and a.dtype.itemsize != width for a in (gone, added)):
        return None  # ids of another length: read and sorted whole
    if len(gone):
        at = sorted_index(ids, gone)
        ids = np.delete(ids, at[at >= 0])
    if len(added):
        added = np.unique(added).astype(ids.dtype)
        new = added[sorted_index(ids, added) < 0]  # the others are rewritten rows of ids kept
        ids = np.insert(ids, np.searchsorted(ids, new), new)
    if not len(ids):
        return pa.array([], pa.string())
    data = pa.py_buffer(np.ascontiguousarray(ids).view(np.uint8))
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(ids), [None, data]).cast(pa.binary()).cast(pa.string())


def _published_graph(store, published: dict):
    """The published manifest's passage graph, or None (none, gone by retention, unreadable)."""
    from graphwright.query.passage_graph import PassageGraph

    previous = published.get("vector_indexes", {}).get(MANIFEST_KEY)
    if not previous:
        return None
    try:
        return PassageGraph(store.files, previous)
    except Exception:  # noqa: BLE001 - built from the tables instead
        return None


def updated_mentions(store, published: dict, entity_keys: pa.Array, chunk_keys: pa.Array) -> Mentions | None:
    """(entity node, chunk code) of every mention edge of the current tables, as
    passage_graph.mention_pairs gives them (in another order), from the graph of the published
    manifest `published` and the entities changed since; None when there is no such graph or
    the log cannot say what changed (a vacuumed log): then the lists are read."""
    old = _published_graph(store, published)
    if old is None:
        return None
    previous = published["vector_indexes"][MANIFEST_KEY]
    since = old.meta.get("versions") or _versions_named_by(previous, old.meta, published.get("table_versions") or {})
    if old.meta.get("format") != FORMAT or not since:
        return None
    changes = changes_since(store, "entities", since.get("entities"), "entity_id", ["entity_id", "chunk_ids"])
    if changes is None:
        return None
    # the published graph's mention edges, each once: an entity's row, from its first mention on
    n_old = old.n_entities
    starts, ends = old.indptr[:n_old], old.indptr[1:n_old + 1]
    entries = slice(int(old.indptr[0]), int(old.indptr[n_old]))
    is_mention = np.asarray(old.kinds[entries]) == MENTION
    owner = np.repeat(np.arange(n_old, dtype=np.int64), (ends - starts).astype(np.int64))[is_mention]
    chunk = np.asarray(old.indices[entries], dtype=np.int64)[is_mention] - n_old
    # carried to the new numbering; an entity whose row changed or went loses its old edges
    entity_now, chunk_now = _fixed(entity_keys), _fixed(chunk_keys)
    entity_map = _carry(old.entity_ids, entity_now)
    redone = pa.concat_arrays([changes.rows.column("entity_id").combine_chunks().cast(pa.string()), changes.deleted.cast(pa.string())])
    at = sorted_index(old.entity_ids, _fixed(pc.unique(redone)))
    entity_map[at[at >= 0]] = -1
    owner, chunk = entity_map[owner], _carry(old.chunk_ids, chunk_now)[chunk]
    kept = (owner >= 0) & (chunk >= 0)
    rows = changes.rows
    lists = rows.column("chunk_ids").combine_chunks()
    new_owner = _codes([pc.take(rows.column("entity_id").combine_chunks(), pc.list_parent_indices(lists))], entity_keys)
    new_chunk = _codes([pc.list_flatten(lists)], chunk_keys)
    return np.concatenate([owner[kept], new_owner]), np.concatenate([chunk[kept], new_chunk])


def _versions_named_by(path: str, meta: dict, table_versions: dict) -> dict | None:
    """The versions a graph written before meta.json recorded them was built from: the
    manifest's, when they give the graph's path (which hashes them)."""
    versions = {name: table_versions.get(name) for name in TABLES}
    return versions if graph_path(versions, meta.get("synonyms")) == path else None


def _carry(old_ids: np.ndarray, new_ids: np.ndarray) -> np.ndarray:
    """For each of `old_ids`, its position among the sorted `new_ids` (-1 where absent), and a
    last slot holding -1, so that an old code of -1 (absent) maps to -1 too."""
    return np.append(sorted_index(new_ids, old_ids), -1)  # the extra slot: what -1 (absent) maps to
