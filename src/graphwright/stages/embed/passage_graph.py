"""Embed: the passage graph the `graph` query mode walks (HippoRAG 2): entity nodes and chunk
(passage) nodes; an edge of weight 1 between a chunk and each entity it mentions, relationship
edges between entities (their weight), and synonym edges between entities (their similarity).

Written as a folder of numpy arrays, `graph/passage-<digest>/` (named by the table versions
and the synonym file it was built from), so a query process maps it from disk instead of
building it from the tables: node ids sorted (entities, then chunks), an undirected graph as
CSR (each edge both ways) with each entry's weight and kind, and each entity's chunk count.
A row lists its neighbours in node order, so an entity's relationship and synonym edges come
first and its mentions last (its first `degree - chunk_count` entries are its edges to other
entities). meta.json is written last.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.stages.embed.synonyms import read_synonyms
from graphwright.storage.delta import IndexStore
from graphwright.util.numeric import fixed_bytes, in_runs, pair_order, spans, to_numpy, transposed

FORMAT = 3  # 3: an entity's mention edges come last in its row
MANIFEST_KEY = "graph"
MENTION, RELATIONSHIP, SYNONYM = 0, 1, 2  # edge kinds
TABLES = ("chunks", "entities", "relationships")  # what a graph is built from
ARRAYS = ("entity_ids", "chunk_ids", "indptr", "indices", "weights", "kinds", "chunk_counts")


Mentions = tuple[np.ndarray, np.ndarray]  # (entity node, chunk code) of each mention edge


def write_passage_graph(store: IndexStore, synonyms: str | None,
                        mentions_of: Callable[[pa.Array, pa.Array], Mentions | None] | None = None,
                        stats: dict | None = None, chunk_keys_of: Callable[[], pa.Array | None] | None = None) -> str:
    """The passage graph's meta.json path (built unless this state's graph exists).
    `mentions_of(entity ids, chunk ids)`: the mention edges if they can be had without reading
    every entity's chunk list (passage_update), else None; `stats` gets how they were had
    ("lineage", "changes" or "table"). `chunk_keys_of()`: the sorted chunk ids if they can be had
    without reading and sorting the chunks table's (passage_update), else None."""
    versions = {name: store.version(name) for name in TABLES}
    relative = graph_path(versions, synonyms)
    if store.files.exists(relative):
        return relative
    chunk_keys = chunk_keys_of() if chunk_keys_of is not None else None
    if stats is not None:
        stats["passage_graph_chunk_ids"] = "table" if chunk_keys is None else "changes"
    entity_keys = sorted_ids(store, "entities", "entity_id")
    chunk_keys = sorted_ids(store, "chunks", "chunk_id") if chunk_keys is None else chunk_keys
    mentions = mentions_of(entity_keys, chunk_keys) if mentions_of is not None else None
    if stats is not None:  # mentions_of may say how it had them
        stats["passage_graph"] = "table" if mentions is None else stats.get("passage_graph", "changes")
    arrays, meta = build(store, synonyms, (entity_keys, chunk_keys), mentions)
    meta["versions"] = versions  # what the next update reads the changes since
    folder = relative.rsplit("/", 1)[0]
    with tempfile.TemporaryDirectory(prefix="graphwright-graph-") as tmp:
        for name, array in arrays.items():
            np.save(Path(tmp) / f"{name}.npy", array)
            store.files.write_file(f"{folder}/{name}.npy", Path(tmp) / f"{name}.npy", move=True)
    store.files.write_bytes(relative, json.dumps(meta).encode())
    return relative


def graph_path(versions: dict[str, int | None], synonyms: str | None) -> str:
    """Where the graph of these table versions and synonym file is (its meta.json)."""
    digest = ids.stable_id("passage-graph", FORMAT, *sorted(versions.items()), synonyms or "", length=16)
    return f"graph/passage-{digest}/meta.json"


def node_keys(store: IndexStore) -> tuple[pa.Array, pa.Array]:
    """The entity ids and the chunk ids, each sorted (node i is the i-th entity, node
    n_entities + j the j-th chunk)."""
    return sorted_ids(store, "entities", "entity_id"), sorted_ids(store, "chunks", "chunk_id")


def sorted_ids(store: IndexStore, table: str, column: str) -> pa.Array:
    ids = store.read(table, columns=[column]).column(column).combine_chunks()
    return pc.take(ids, pc.sort_indices(ids))


def mention_pairs(store: IndexStore, entity_keys: pa.Array, chunk_keys: pa.Array) -> Mentions:
    """(entity node, chunk code) of every chunk each entity lists, from the whole entities table
    (chunk codes index `chunk_keys`; -1 where it lacks one)."""
    owners, chunks = [], []
    for batches in in_runs(store.scanner("entities")(["entity_id", "chunk_ids"]), lambda b: len(pc.list_flatten(b.column("chunk_ids")))):
        lists = [b.column("chunk_ids") for b in batches]
        owners.append(_codes([pc.take(b.column("entity_id"), pc.list_parent_indices(x)) for b, x in zip(batches, lists)], entity_keys))
        chunks.append(_codes([pc.list_flatten(x) for x in lists], chunk_keys))
    empty = np.zeros(0, np.int64)
    return np.concatenate(owners or [empty]), np.concatenate(chunks or [empty])


def build(store: IndexStore, synonyms: str | None, keys: tuple[pa.Array, pa.Array] | None = None,
          mentions: Mentions | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """The graph's arrays and meta; `mentions`: its (entity node, chunk code) pairs when known
    (an update's), else read from every entity's chunk list."""
    entity_keys, chunk_keys = keys if keys is not None else node_keys(store)
    n_entities, n_chunks = len(entity_keys), len(chunk_keys)
    n = n_entities + n_chunks
    sources, targets, weight, kind = [], [], [], []  # entries between entities, each way

    def add(a: np.ndarray, b: np.ndarray, w: np.ndarray, k: int) -> None:
        ok = (a >= 0) & (b >= 0)  # an id the node lists do not hold (never, in a consistent index)
        a, b, w = a[ok], b[ok], w[ok].astype(np.float32)
        sources.extend((a, b))
        targets.extend((b, a))
        weight.extend((w, w))
        kind.extend((np.full(len(a), k, np.int8),) * 2)

    for batches in in_runs(store.scanner("relationships")(["source_id", "target_id", "weight"]), lambda b: b.num_rows):
        add(_codes([b.column("source_id") for b in batches], entity_keys), _codes([b.column("target_id") for b in batches], entity_keys),
            np.concatenate([to_numpy(b.column("weight"), np.float64) for b in batches]), RELATIONSHIP)
    pairs = read_synonyms(store.files, synonyms)
    if pairs is not None and pairs.num_rows:
        add(_codes(pairs.column("entity_id").chunks, entity_keys), _codes(pairs.column("other_id").chunks, entity_keys),
            to_numpy(pairs.column("similarity"), np.float32), SYNONYM)
    owner, chunk = mentions if mentions is not None else mention_pairs(store, entity_keys, chunk_keys)
    owner, chunk = _by_owner(owner, chunk, n_chunks)
    # an entity's row is its entity edges (neighbours below n_entities: relationship_pairs reads
    # only those), then its mentions; a chunk's row is the entities that mention it. Each part is
    # put in place from its own order instead of sorting every entry's key (19M keys at 1.2M
    # chunks, and a division and a remainder of each to cut rows from neighbours): the entity
    # edges by pair_order (stable: a relationship stays before a synonym edge to the same
    # entity, as added), the mentions as given (by entity, then chunk), the chunks' rows as the
    # mentions' transpose (each chunk's entities in entity order). Whatever order the scan gave
    # the batches in (one that is not always the same), the rows come out the same.
    src, dst = (np.concatenate(a) if a else np.zeros(0, np.int64) for a in (sources, targets))
    order = pair_order(src, dst, n_entities, n_entities)
    src, dst = src[order], dst[order]
    edges = np.bincount(src, minlength=n_entities)
    mentions_of = np.bincount(owner, minlength=n_entities)
    per_chunk, chunk_rows = transposed(owner, chunk, n_entities, n_chunks)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.r_[edges + mentions_of, per_chunk], out=indptr[1:])
    edge_at = spans(indptr[:n_entities], edges)
    mention_at = spans(indptr[:n_entities] + edges, mentions_of)
    indices = np.empty(int(indptr[-1]), np.int32)
    indices[edge_at], indices[mention_at] = dst, n_entities + chunk
    indices[indptr[n_entities]:] = chunk_rows
    weights = np.ones(len(indices), np.float32)
    weights[edge_at] = (np.concatenate(weight) if weight else np.zeros(0, np.float32))[order]
    kinds = np.full(len(indices), MENTION, np.int8)
    kinds[edge_at] = (np.concatenate(kind) if kind else np.zeros(0, np.int8))[order]
    arrays = {
        "chunk_counts": mentions_of.astype(np.int64),
        "entity_ids": _fixed(entity_keys), "chunk_ids": _fixed(chunk_keys), "indptr": indptr,
        "indices": indices, "weights": weights, "kinds": kinds,
    }
    meta = {"format": FORMAT, "entities": n_entities, "chunks": n_chunks, "entries": int(len(indices)),
            "synonyms": synonyms, "arrays": list(ARRAYS)}
    return arrays, meta


def _by_owner(owner: np.ndarray, chunk: np.ndarray, n_chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """The mention edges whose entity and chunk are nodes, ordered by entity, then chunk: as
    given when they already are (resolve's codes give them so), else sorted."""
    ok = (owner >= 0) & (chunk >= 0)  # an id the node lists do not hold (never, in a consistent index)
    if not ok.all():  # else kept as given: two copies of 9.6M edges were 0.2-0.3 s at 1.2M chunks
        owner, chunk = owner[ok], chunk[ok]
    owner, chunk = np.asarray(owner, np.int64), np.asarray(chunk, np.int64)
    key = owner * max(n_chunks, 1) + chunk
    if len(key) > 1 and (key[1:] < key[:-1]).any():
        key = np.sort(key)
        owner, chunk = key // max(n_chunks, 1), key % max(n_chunks, 1)
    return owner, chunk


def _codes(values: list, keys: pa.Array) -> np.ndarray:
    """Positions of `values` (arrays, coded in one lookup) in the sorted `keys` (-1 where absent)."""
    return to_numpy(pc.fill_null(pc.index_in(pa.chunked_array(values, keys.type), value_set=keys), -1), np.int64)


def _fixed(keys: pa.Array) -> np.ndarray:
    """Sorted ids as a fixed-width bytes array (searchsorted finds an id without a hash table);
    ids of one length (content hashes) are cut from the array's data buffer, not listed."""
    if not len(keys):
        return np.zeros(0, dtype="S1")
    cut = fixed_bytes(keys)
    if cut is not None:
        return cut
    keys = keys.cast(pa.string())
    width = int(to_numpy(pc.binary_length(keys), np.int64).max())
    return np.array([v.encode() for v in keys.to_pylist()], dtype=f"S{max(width, 1)}")
