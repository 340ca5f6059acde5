"""cuVS indexes behind the vector index interface (the [gpu] extra; imported lazily).

Written against cuVS 26.10's Python API (cuvs.neighbors.brute_force / cagra: build, search,
save, load) and run by the `gpu` tests and scripts/gpu-check. Exact search (brute force) below `hnsw_threshold` vectors, CAGRA above, as the faiss
engine uses a flat index and HNSW. Both use cuVS's default metric, squared L2: on the normalized
vectors graphwright stores it ranks as inner product does, and the score returned is the inner
product, 1 - d/2. A saved cuVS index loads only where cuVS and a GPU are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class CuvsIndex:
    """`search(queries, k) -> (scores, positions)`, like a faiss index."""

    def __init__(self, kind: str, index):
        self.kind = kind  # "brute_force" or "cagra"
        self.index = index

    @classmethod
    def build(cls, vectors: np.ndarray, exact: bool) -> CuvsIndex:
        import cupy as cp
        from cuvs.neighbors import brute_force, cagra

        data = cp.asarray(np.ascontiguousarray(vectors, dtype=np.float32))
        if exact:
            return cls("brute_force", brute_force.build(data))
        return cls("cagra", cagra.build(cagra.IndexParams(), data))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import cupy as cp
        from cuvs.neighbors import brute_force, cagra

        q = cp.asarray(np.ascontiguousarray(queries, dtype=np.float32))
        if self.kind == "brute_force":
            distances, neighbors = brute_force.search(self.index, q, k)
        else:
            distances, neighbors = cagra.search(cagra.SearchParams(itopk_size=max(64, k)), self.index, q, k)
        distances = cp.asnumpy(cp.asarray(distances))
        neighbors = cp.asnumpy(cp.asarray(neighbors)).astype(np.int64)
        return 1.0 - distances / 2.0, neighbors

    def save(self, path: Path) -> None:
        from cuvs.neighbors import brute_force, cagra

        (brute_force if self.kind == "brute_force" else cagra).save(str(path), self.index)

    @classmethod
    def load(cls, kind: str, path: Path) -> CuvsIndex:
        from cuvs.neighbors import brute_force, cagra

        if kind == "brute_force":
            return cls(kind, brute_force.load(str(path)))
        index, dataset = cagra.Index(), cagra.Dataset()  # cagra.load fills an index it is given
        cagra.load(index, str(path), out_dataset=dataset)
        return cls(kind, index)
