"""Embed: the vector index files of an index (plain functions over its embeddings table). Files
are named by their content, so a published version's files are never overwritten and unchanged
vectors reuse the existing file."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.config import PipelineConfig
from graphwright.engines.vectors import (
    ITEM_KEY,
    build_index_from_batches,
    item_keys,
    may_update,
    save_to,
    update_index,
)
from graphwright.engines.vectors.overlay import (
    OVERLAY_SUFFIX,
    LayeredIndex,
    is_overlay,
    load_index,
    next_overlay,
    readable_base,
    write_overlay,
)
from graphwright.storage import manifest
from graphwright.storage.delta import IndexStore
from graphwright.storage.diff import key_column
from graphwright.util.numeric import fixed_bytes, to_numpy


def write_vector_index(store: IndexStore, kind: str, model: str, cfg: PipelineConfig, at: int | None = None,
                       rebuild: bool = False, keys: pa.Table | None = None) -> tuple[str, dict[str, str]]:
    """Build the ANN index for one kind, or update the published one where it can: with an
    overlay file while the change is small (engines.vectors.overlay; any faiss index), else in
    place (engines.vectors.update_index; an HNSW index), from the embeddings table (at Delta version `at`: a repair
    rebuilds a published version's file). Returns the file's path relative to the index and the
    sha256 of the files written (none when the file was already there). `keys`: the kind's
    (item_id, text_hash) rows as the table holds them now, when the caller has them (the embed
    stage: the rows it read, less those it deleted, and those it appended), else read."""
    where = f"kind = '{kind}' AND model = '{model}'"
    if keys is None or at is not None:
        keys = store.read("embeddings", version=at, columns=["item_id", "text_hash"], where=where)
    keys = by_item(keys)
    digest = ids.stable_id_of_strings("vectors", (kind, model, cfg.vectors.engine, cfg.vectors.hnsw_threshold),
                                      pa.chunked_array(keys.column("text_hash").chunks + keys.column("item_id").chunks, pa.string()),
                                      length=16)
    relative = f"vectors/{kind}-{digest}.faiss"
    layered = f"vectors/{kind}-{digest}{OVERLAY_SUFFIX}"
    if not rebuild:
        for done in (relative, layered):
            if store.files.exists(done):
                return done, {}

    def vectors_of(wanted: list[str]) -> np.ndarray:
        return vector_matrix(store, where, pa.chunked_array([pa.array(wanted, pa.string())]), at)

    index = None
    updatable = may_update(cfg.vectors, keys.num_rows) and not rebuild
    # an overlay lays over any published faiss index, a flat one too: below the HNSW threshold
    # the index was rebuilt from a scan of the table (2.2 s a 0.1% update at 145k chunks)
    layerable = cfg.vectors.engine == "faiss" and cfg.vectors.overlay_max_share > 0 and not rebuild
    published, pinned = published_vector_file(store, kind, cfg) if updatable or layerable else (None, None)
    if published is not None and layerable:
        overlay = next_overlay(store.files, published, keys.column("item_id").combine_chunks(),
                               keys.column("text_hash").combine_chunks(),
                               lambda wanted, hashes: recent_vectors(store, kind, model, wanted, hashes, pinned, vectors_of),
                               cfg.vectors.overlay_max_share)
        if overlay is not None:
            return layered, write_overlay(store.files, layered, overlay)
    # the previous index is loaded (2 GB at 1.2M chunks) only where an update can use it
    previous = load_index(store.files, published) if published is not None and updatable else None
    if previous is not None:
        if isinstance(previous, LayeredIndex):
            previous = previous.folded()
        index = update_index(previous, keys.column("item_id").to_pylist(), keys.column("text_hash").to_pylist(),
                             vectors_of, cfg.vectors)
        del previous
    if index is None:
        index = build_index_from_batches(keys.num_rows, vector_batches(store, where, keys, at), cfg.vectors)
    return relative, save_to(store.files, relative, index)


def by_item(keys: pa.Table) -> pa.Table:
    """`keys` (item_id, text_hash) sorted by item id, then text hash: the order a vector index's
    name hashes them in, whatever order they were read in. Ids of one length are sorted as numpy
    bytes (1.2M chunk ids: 0.4 s against Arrow's 0.9-1.3 s), unless two rows share one."""
    ids_ = fixed_bytes(keys.column("item_id"))
    if ids_ is not None and len(ids_) > 1:
        order = np.argsort(ids_, kind="stable")
        ordered = ids_[order]
        if not (ordered[1:] == ordered[:-1]).any():
            return keys.take(pa.array(order))
    return keys.sort_by([("item_id", "ascending"), ("text_hash", "ascending")])


def published_vector_file(store: IndexStore, kind: str, cfg: PipelineConfig | None = None) -> tuple[str | None, int | None]:
    """The latest published version's vector index file of `kind` (a base or an overlay), if it
    has a usable one, and the embeddings table version it pins. A file built under other index
    settings than `cfg`'s (engine, HNSW threshold) is not usable: an update would keep its kind."""
    latest = manifest.published(store)
    if not latest:
        return None, None
    relative, pinned = latest["vector_indexes"].get(kind), latest["table_versions"].get("embeddings")
    if relative is None or not store.files.exists(relative) or (cfg is not None and not _same_index_settings(latest, cfg)):
        return None, pinned
    if is_overlay(relative):  # an overlay whose base is gone, or that cannot be read, is rebuilt
        base = readable_base(store.files, relative)
        if base is None or not store.files.exists(base):
            return None, pinned
    return relative, pinned


def _same_index_settings(published: dict, cfg: PipelineConfig) -> bool:
    """Whether the published version's vector files were built under `cfg`'s engine and HNSW threshold."""
    import json

    try:
        built = json.loads(published.get("config") or "{}").get("vectors") or {}
    except ValueError:
        return False
    now = cfg.vectors
    return built.get("engine", now.engine) == now.engine and built.get("hnsw_threshold", now.hnsw_threshold) == now.hnsw_threshold


def recent_vectors(store: IndexStore, kind: str, model: str, wanted: list[str], hashes: list[str], since: int | None,
                   vectors_of) -> np.ndarray:
    """The vectors of the `wanted` items (rows in that order) embedding the text of `hashes`,
    read from the embeddings files written since Delta version `since` (an update embeds its new
    items there: a few files, not the 2 GB table); the rest through `vectors_of`, which scans.
    An item found in two files keeps its newest vector."""
    from graphwright.storage.changes import commit_actions
    from graphwright.storage.patch import read_data_file

    now = store.version("embeddings")
    want_keys = item_keys(wanted, hashes)  # from the overlay: looking them up among every key hashed 1.2M ids (0.5 s)
    matrix, found = None, np.zeros(len(wanted), dtype=bool)
    # newest first: the stage appends its vectors after its deletes, which rewrite whole files
    for version in range(now, since, -1) if since is not None and now is not None else ():
        if found.all():
            break
        commit = commit_actions(store, "embeddings", version)
        for path in commit.added if commit else ():
            partitioned = path.startswith("kind=")  # the table is partitioned by kind: its files hold no kind column
            if partitioned and not path.startswith(f"kind={kind}/"):
                continue
            try:
                rows = read_data_file(store, "embeddings", path, ["model", "item_id", "text_hash", "vector"] + ([] if partitioned else ["kind"]))
            except Exception:  # noqa: BLE001 - vacuumed since (NotFoundError on an object store): the scan below finds it
                continue
            mine = pc.equal(rows.column("model"), model)
            rows = rows.filter(mine if partitioned else pc.and_(mine, pc.equal(rows.column("kind"), kind)))
            at = pc.index_in(key_column(rows, ITEM_KEY), value_set=want_keys).fill_null(-1).to_numpy(zero_copy_only=False)
            take = np.flatnonzero((at >= 0) & ~found[np.maximum(at, 0)])
            if not len(take):
                continue
            flat = to_numpy(pc.list_flatten(rows.column("vector").take(pa.array(take))), np.float32).reshape(len(take), -1)
            if matrix is None:
                matrix = np.zeros((len(wanted), flat.shape[1]), np.float32)
            matrix[at[take]] = flat
            found[at[take]] = True
    if found.all():
        return matrix
    rest = np.flatnonzero(~found)
    scanned = vectors_of([wanted[i] for i in rest])
    if matrix is None:
        matrix = np.zeros((len(wanted), scanned.shape[1]), np.float32)
    matrix[rest] = scanned
    return matrix


def vector_batches(store: IndexStore, where: str, keys: pa.Table, at: int | None = None):
    """(item ids, text hashes, vectors) of the items in `keys` (item_id, text_hash), batch by
    batch from a streaming scan, each item once: what build_index_from_batches adds."""
    hashes = keys.column("text_hash").combine_chunks()
    for rows, item_ids, vectors in _scan_vectors(store, where, keys.column("item_id").combine_chunks(), at):
        yield item_ids.to_pylist(), hashes.take(pa.array(rows)).to_pylist(), vectors


def vector_matrix(store: IndexStore, where: str, item_ids: pa.ChunkedArray, at: int | None = None) -> np.ndarray:
    """The vectors of `item_ids`, row i for item i, filled from a streaming scan (one float32
    matrix; reading the table whole and flattening it took three copies)."""
    wanted = item_ids.combine_chunks()
    matrix = None
    for rows, _, vectors in _scan_vectors(store, where, wanted, at):
        if matrix is None:
            matrix = np.zeros((len(wanted), vectors.shape[1]), dtype=np.float32)
        matrix[rows] = vectors
    return matrix if matrix is not None else np.zeros((0, 1), np.float32)


def _scan_vectors(store: IndexStore, where: str, wanted: pa.Array, at: int | None):
    """(positions in `wanted`, item ids, vectors) of the embeddings rows of `wanted` items, batch
    by batch in scan order, each item once (its first row)."""
    seen = np.zeros(len(wanted), dtype=bool)
    for batch in store.scanner("embeddings", where=where, version=at)(["item_id", "vector"]):
        rows = to_numpy(pc.index_in(batch.column("item_id"), value_set=wanted).fill_null(-1), np.int64)
        keep = rows >= 0
        keep[keep] = ~seen[rows[keep]]
        if not keep.any():
            continue
        if not keep.all():
            batch, rows = batch.filter(pa.array(keep)), rows[keep]
        first = np.unique(rows, return_index=True)[1]
        if len(first) < batch.num_rows:  # an item twice in one batch: its first row, in batch order
            first.sort()
            batch, rows = batch.take(pa.array(first)), rows[first]
        seen[rows] = True
        flat = to_numpy(pc.list_flatten(batch.column("vector")), np.float32)
        yield rows, batch.column("item_id"), flat.reshape(batch.num_rows, -1)
