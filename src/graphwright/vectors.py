"""Vector indexes behind one interface: build from ids + normalized vectors, save, load, search.
CPU: faiss (exact inner product below `hnsw_threshold` vectors, HNSW above). GPU: cuVS
(brute force below the threshold, CAGRA above; graphwright.vectors_gpu)."""

from __future__ import annotations

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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    kind = getattr(vi.index, "kind", "faiss")
    if kind == "faiss":
        import faiss

        faiss.write_index(vi.index, str(tmp))
    else:
        vi.index.save(tmp)
    ids = pa.table({"item_id": vi.ids}).replace_schema_metadata({"index_kind": kind})
    pq.write_table(ids, str(path.with_suffix(".ids.parquet")))
    tmp.replace(path)  # the index file appears last: its presence means both files are complete


def load_index(path: Path) -> VectorIndex:
    table = pq.read_table(str(path.with_suffix(".ids.parquet")))
    kind = (table.schema.metadata or {}).get(b"index_kind", b"faiss").decode()
    ids = table.column("item_id").to_pylist()
    if kind != "faiss":
        from graphwright.vectors_gpu import CuvsIndex

        return VectorIndex(ids, CuvsIndex.load(kind, path))
    import faiss

    return VectorIndex(ids, faiss.read_index(str(path)))
