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
    VectorIndex,
    build_index_from_batches,
    load_from,
    may_update,
    save_to,
    update_index,
)
from graphwright.storage import manifest
from graphwright.storage.delta import IndexStore
from graphwright.util.numeric import to_numpy


def write_vector_index(store: IndexStore, kind: str, model: str, cfg: PipelineConfig, at: int | None = None,
                       rebuild: bool = False) -> tuple[str, dict[str, str]]:
    """Build the ANN index for one kind, or update the published one in place where it can
    (engines.vectors.update_index), from the embeddings table (at Delta version `at`: a repair
    rebuilds a published version's file). Returns the file's path relative to the index and the
    sha256 of the files written (none when the file was already there)."""
    where = f"kind = '{kind}' AND model = '{model}'"
    keys = store.read("embeddings", version=at, columns=["item_id", "text_hash"], where=where).sort_by("item_id")
    digest = ids.stable_id_of_strings("vectors", (kind, model, cfg.vectors.engine, cfg.vectors.hnsw_threshold),
                                      pa.chunked_array(keys.column("text_hash").chunks + keys.column("item_id").chunks, pa.string()),
                                      length=16)
    relative = f"vectors/{kind}-{digest}.faiss"
    written: dict[str, str] = {}
    if rebuild or not store.files.exists(relative):
        def vectors_of(wanted: list[str]) -> np.ndarray:
            return vector_matrix(store, where, pa.chunked_array([pa.array(wanted, pa.string())]), at)

        index = None
        # the previous index is loaded (2 GB at 1.2M chunks) only where an update can use it
        previous = published_vector_index(store, kind) if may_update(cfg.vectors, keys.num_rows) and not rebuild else None
        if previous is not None:
            index = update_index(previous, keys.column("item_id").to_pylist(), keys.column("text_hash").to_pylist(),
                                 vectors_of, cfg.vectors)
            del previous
        if index is None:
            index = build_index_from_batches(keys.num_rows, vector_batches(store, where, keys, at), cfg.vectors)
        written = save_to(store.files, relative, index)
    return relative, written


def published_vector_index(store: IndexStore, kind: str) -> VectorIndex | None:
    """The latest published version's vector index of `kind`, if it has one."""
    try:
        relative = manifest.load_manifest(store)["vector_indexes"].get(kind)
    except manifest.NoPublishedVersion:
        return None
    if relative is None or not store.files.exists(relative):
        return None
    return load_from(store.files, relative)


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
