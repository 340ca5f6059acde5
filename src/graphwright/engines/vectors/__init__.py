"""Vector indexes behind one interface: build from ids + normalized vectors, save, load, search.
CPU: faiss (exact inner product below `hnsw_threshold` vectors, HNSW above). GPU: cuVS
(brute force below the threshold, CAGRA above; cuvs_index). A CPU HNSW index is
updated with an overlay file when few of its vectors changed (overlay), and in place when the
overlay has grown (update_index)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graphwright.config import VectorConfig
from graphwright.storage.diff import key_column

# An HNSW index is updated in place (new vectors added, removed ones skipped by search) while
# the removed vectors are at most this share of those it holds; beyond it, it is rebuilt.
MAX_REMOVED_SHARE = 0.2
HNSW_M = 32  # neighbours per vector and level in faiss's HNSW graph
ITEM_KEY = ("item_id", "text_hash")  # what a vector embeds: an item's text


@dataclass
class VectorIndex:
    ids: list[str | None]  # per position; None: a removed item, whose vector search skips
    index: object  # a faiss.Index, or a cuvs_index.CuvsIndex: search(queries, k) -> (scores, positions)
    text_hashes: list[str | None] | None = None  # per position, what its vector embeds (lets an update find what changed)
    _skip: object = field(default=None, init=False, repr=False)

    def __post_init__(self):
        self._live = len(self.ids) - self.ids.count(None)

    def search(self, queries: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        live = self._live
        if not live:
            return [[] for _ in range(len(queries))]
        k = min(k, live)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if live < len(self.ids):
            scores, positions = self.index.search(queries, k, params=self._skip_removed())
        else:
            scores, positions = self.index.search(queries, k)
        return [
            [(self.ids[p], float(s)) for p, s in zip(prow, srow) if 0 <= p < len(self.ids) and self.ids[p] is not None]
            for prow, srow in zip(positions, scores)
        ]

    def reconstruct(self, position: int) -> np.ndarray:
        return self.index.reconstruct(position)

    def vectors(self, positions) -> np.ndarray:
        """The vectors at `positions`, as they were added (a faiss flat or HNSW-flat index keeps
        them whole). AttributeError from an index that cannot give them back (cuVS)."""
        return np.asarray(self.index.reconstruct_batch(np.asarray(positions, dtype=np.int64)), dtype=np.float32)

    def _skip_removed(self):
        """faiss search parameters that leave out removed positions (kept on the object: faiss
        holds only a pointer to the selector)."""
        if self._skip is None:
            import faiss

            removed = np.asarray([p for p, i in enumerate(self.ids) if i is None], dtype=np.int64)
            selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(removed))
            if hasattr(self.index, "hnsw"):
                params = faiss.SearchParametersHNSW(sel=selector, efSearch=self.index.hnsw.efSearch)
            else:  # a flat base under an overlay
                params = faiss.SearchParameters(sel=selector)
            self._skip = (removed, selector, params)
        return self._skip[2]


def build_index(ids: list[str], vectors: np.ndarray, config: VectorConfig, text_hashes: list[str] | None = None) -> VectorIndex:
    if config.engine == "cuvs" and len(ids):
        from graphwright.engines.vectors.cuvs_index import CuvsIndex

        return VectorIndex(list(ids), CuvsIndex.build(vectors, exact=len(ids) < config.hnsw_threshold), text_hashes)
    index = _empty_faiss(vectors.shape[1] if len(vectors) else 1, len(ids), config)
    if len(vectors):
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return VectorIndex(list(ids), index, text_hashes)


def build_index_from_batches(count: int, batches: Iterable[tuple[list[str], list[str] | None, np.ndarray]],
                             config: VectorConfig) -> VectorIndex:
    """A faiss index of `count` vectors added batch by batch as (ids, text hashes, vectors)
    arrive: positions follow arrival order, and no matrix of every vector is ever held (at 1.2M
    chunks x 384 dimensions that matrix was 1.9 GB beside the index's own copy). cuVS builds
    from one matrix, so it goes through build_index."""
    if config.engine == "cuvs" and count:
        parts = list(batches)
        return build_index([i for p in parts for i in p[0]], np.concatenate([p[2] for p in parts]), config,
                           [h for p in parts for h in (p[1] or [])] if all(p[1] is not None for p in parts) else None)
    index, ids, hashes, hashed = None, [], [], True
    for batch_ids, batch_hashes, vectors in batches:
        if index is None:
            index = _empty_faiss(vectors.shape[1], count, config)
            _reserve(index, count, vectors.shape[1])
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        ids.extend(batch_ids)
        hashed = hashed and batch_hashes is not None
        hashes.extend(batch_hashes or ())
    return VectorIndex(ids, index if index is not None else _empty_faiss(1, 0, config), hashes if hashed else None)


def _reserve(index, count: int, dim: int) -> None:
    """Room for `count` vectors in the arrays faiss grows as batches are added. Grown batch by
    batch they double (std::vector), so a build peaked near twice the index's size, and higher
    while the arrays moved; reserved once, it holds the index's own size. resize(n) then
    resize(0) keeps the capacity."""
    import faiss

    hnsw = isinstance(index, faiss.IndexHNSWFlat)
    flat = faiss.downcast_index(index.storage) if hnsw else index
    flat.codes.resize(count * dim * 4)
    flat.codes.resize(0)
    if hnsw:  # 2M neighbour slots per vector on level 0; the upper levels add M for 1/(M-1) of them
        index.hnsw.neighbors.resize(count * (2 * HNSW_M + 2))
        index.hnsw.neighbors.resize(0)


def _empty_faiss(dim: int, count: int, config: VectorConfig):
    import faiss

    if count >= config.hnsw_threshold:
        index = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = 128
        return index
    return faiss.IndexFlatIP(dim)


def item_keys(item_ids, hashes) -> pa.Array:
    """Each item's key, its id and the hash of the text its vector embeds (null where the id is)."""
    return key_column(pa.table({"item_id": pa.array(item_ids, pa.string()), "text_hash": pa.array(hashes, pa.string())}), ITEM_KEY)


def may_update(config: VectorConfig, items: int) -> bool:
    """Whether an index of `items` vectors built with `config` is one update_index can update
    (a faiss HNSW index): worth loading the previous index for."""
    return config.engine == "faiss" and items >= config.hnsw_threshold


def update_index(previous: VectorIndex, ids: list[str], text_hashes: list[str],
                 vectors_of: Callable[[list[str]], np.ndarray], config: VectorConfig) -> VectorIndex | None:
    """`previous` (an HNSW index) brought to the items `ids` whose vectors embed `text_hashes`:
    the vectors of new and changed items (`vectors_of(their ids)`, rows in that order) are added, and
    those of changed and removed items are skipped from then on. Rebuilding an HNSW index of 1.2M
    vectors took minutes for a 1% change. None where an update does not apply: a CPU index below
    the HNSW threshold (rebuilt in seconds), a cuVS index, a previous index without text hashes,
    or more than MAX_REMOVED_SHARE of its vectors removed."""
    import faiss

    if not may_update(config, len(ids)) or previous.text_hashes is None or not isinstance(previous.index, faiss.IndexHNSWFlat):
        return None
    before, now = item_keys(previous.ids, previous.text_hashes), item_keys(ids, text_hashes)
    alive = pc.fill_null(pc.is_in(before, value_set=now), False)  # a removed position's key is null
    if len(previous.ids) - pc.sum(alive).as_py() > MAX_REMOVED_SHARE * len(previous.ids):
        return None
    added = pc.invert(pc.is_in(now, value_set=before.filter(alive)))
    new_ids = pa.array(ids, pa.string()).filter(added).to_pylist()
    new_hashes = pa.array(text_hashes, pa.string()).filter(added).to_pylist()
    if new_ids:
        previous.index.add(np.ascontiguousarray(vectors_of(new_ids), dtype=np.float32))
    keep = alive.to_pylist()
    return VectorIndex([i if k else None for i, k in zip(previous.ids, keep)] + new_ids, previous.index,
                       [h if k else None for h, k in zip(previous.text_hashes, keep)] + new_hashes)


def save_index(vi: VectorIndex, path: Path) -> None:
    """Write a local file pair (`path` and its .ids.parquet)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    path.with_suffix(".ids.parquet").write_bytes(_write(vi, tmp))
    tmp.replace(path)  # the index file appears last: its presence means both files are complete


def load_index(path: Path) -> VectorIndex:
    return _load(path, path.with_suffix(".ids.parquet").read_bytes())


def ids_path(relative: str) -> str:
    return relative.removesuffix(".faiss") + ".ids.parquet"


def save_to(files, relative: str, vi: VectorIndex) -> dict[str, str]:
    """Write into an index's files (local or object store); the index object is put last, so
    its presence means both are complete. The index goes through a local file, never a copy
    in memory (at 1.3M vectors that copy was 2 GB). Returns the sha256 of each file written
    (the manifest records them; `graphwright check` compares)."""
    import hashlib

    with tempfile.TemporaryDirectory() as tmp:
        ids_bytes = _write(vi, Path(tmp) / "index")
        digest = hashlib.sha256()
        with open(Path(tmp) / "index", "rb") as fh:
            for block in iter(lambda: fh.read(8 << 20), b""):
                digest.update(block)
        files.write_bytes(ids_path(relative), ids_bytes)
        files.write_file(relative, Path(tmp) / "index", move=True)
    return {relative: digest.hexdigest(), ids_path(relative): hashlib.sha256(ids_bytes).hexdigest()}


def load_from(files, relative: str) -> VectorIndex:
    """Read from an index's files; the index file is read from disk (a local copy for an object
    store), not from a copy of its bytes in memory. A published index may be an overlay:
    overlay.load_index reads either."""
    with files.local(relative) as path:
        return _load(path, files.read_bytes(ids_path(relative)))


def _write(vi: VectorIndex, path: Path) -> bytes:
    """Write the index to `path`; return its ids as parquet bytes, whose metadata records the index kind."""
    kind = getattr(vi.index, "kind", "faiss")
    sink = pa.BufferOutputStream()
    columns = {"item_id": pa.array(vi.ids, pa.string())}
    if vi.text_hashes is not None:
        columns["text_hash"] = pa.array(vi.text_hashes, pa.string())
    ids = pa.table(columns).replace_schema_metadata({"index_kind": kind})
    pq.write_table(ids, sink)
    if kind == "faiss":
        import faiss

        faiss.write_index(vi.index, str(path))
    else:
        vi.index.save(path)
    return sink.getvalue().to_pybytes()


def _load(path: Path, ids_bytes: bytes) -> VectorIndex:
    table = pq.read_table(pa.BufferReader(ids_bytes))
    kind = (table.schema.metadata or {}).get(b"index_kind", b"faiss").decode()
    ids = table.column("item_id").to_pylist()
    hashes = table.column("text_hash").to_pylist() if "text_hash" in table.column_names else None
    if kind != "faiss":
        from graphwright.engines.vectors.cuvs_index import CuvsIndex

        try:
            return VectorIndex(ids, CuvsIndex.load(kind, path), hashes)
        except ImportError as exc:
            raise ValueError(f"this vector index was built with cuVS ({kind}) and needs the [gpu] extra and a GPU to load; "
                             f"query it on a GPU host, or re-index with vectors.engine: faiss ({exc})") from exc
    import faiss

    return VectorIndex(ids, faiss.read_index(str(path)), hashes)
