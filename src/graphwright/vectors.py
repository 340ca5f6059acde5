"""Vector indexes behind one interface: build from ids + normalized vectors, save, load, search.
CPU: faiss (exact inner product below `hnsw_threshold` vectors, HNSW above). GPU: cuVS
(brute force below the threshold, CAGRA above; graphwright.vectors_gpu)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graphwright.config import VectorConfig


@dataclass
class VectorIndex:
    ids: list[str]
    index: object  # a faiss.Index, or a vectors_gpu.CuvsIndex: search(queries, k) -> (scores, positions)

    def search(self, queries: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        if not self.ids:
            return [[] for _ in range(len(queries))]
        k = min(k, len(self.ids))
        scores, positions = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
        return [
            [(self.ids[p], float(s)) for p, s in zip(prow, srow) if 0 <= p < len(self.ids)]
            for prow, srow in zip(positions, scores)
        ]


def build_index(ids: list[str], vectors: np.ndarray, config: VectorConfig) -> VectorIndex:
    if config.engine == "cuvs" and len(ids):
        from graphwright.vectors_gpu import CuvsIndex

        return VectorIndex(list(ids), CuvsIndex.build(vectors, exact=len(ids) < config.hnsw_threshold))
    import faiss

    dim = vectors.shape[1] if len(vectors) else 1
    if len(ids) >= config.hnsw_threshold:
        index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = 128
    else:
        index = faiss.IndexFlatIP(dim)
    if len(vectors):
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return VectorIndex(list(ids), index)


def save_index(vi: VectorIndex, path: Path) -> None:
    """Write a local file pair (`path` and its .ids.parquet)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    path.with_suffix(".ids.parquet").write_bytes(_write(vi, tmp))
    tmp.replace(path)  # the index file appears last: its presence means both files are complete


def load_index(path: Path) -> VectorIndex:
    return from_bytes(path.read_bytes(), path.with_suffix(".ids.parquet").read_bytes())


def ids_path(relative: str) -> str:
    return relative.removesuffix(".faiss") + ".ids.parquet"


def save_to(files, relative: str, vi: VectorIndex) -> None:
    """Write into an index's files (local or object store); the index object is put last, so
    its presence means both are complete. The index goes through a local file, never a copy
    in memory (at 1.3M vectors that copy was 2 GB)."""
    with tempfile.TemporaryDirectory() as tmp:
        ids_bytes = _write(vi, Path(tmp) / "index")
        files.write_bytes(ids_path(relative), ids_bytes)
        files.write_file(relative, Path(tmp) / "index")


def load_from(files, relative: str) -> VectorIndex:
    return from_bytes(files.read_bytes(relative), files.read_bytes(ids_path(relative)))


def _write(vi: VectorIndex, path: Path) -> bytes:
    """Write the index to `path`; return its ids as parquet bytes, whose metadata records the index kind."""
    kind = getattr(vi.index, "kind", "faiss")
    sink = pa.BufferOutputStream()
    ids = pa.table({"item_id": pa.array(vi.ids, pa.string())}).replace_schema_metadata({"index_kind": kind})
    pq.write_table(ids, sink)
    if kind == "faiss":
        import faiss

        faiss.write_index(vi.index, str(path))
    else:
        vi.index.save(path)
    return sink.getvalue().to_pybytes()


def from_bytes(index_bytes: bytes, ids_bytes: bytes) -> VectorIndex:
    table = pq.read_table(pa.BufferReader(ids_bytes))
    kind = (table.schema.metadata or {}).get(b"index_kind", b"faiss").decode()
    ids = table.column("item_id").to_pylist()
    if kind != "faiss":
        from graphwright.vectors_gpu import CuvsIndex

        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "index").write_bytes(index_bytes)
            try:
                return VectorIndex(ids, CuvsIndex.load(kind, Path(tmp) / "index"))
            except ImportError as exc:
                raise ValueError(f"this vector index was built with cuVS ({kind}) and needs the [gpu] extra and a GPU to load; "
                                 f"query it on a GPU host, or re-index with vectors.engine: faiss ({exc})") from exc
    import faiss

    return VectorIndex(ids, faiss.deserialize_index(np.frombuffer(index_bytes, dtype=np.uint8)))
