"""GPU engines against the CPU ones, for scripts/gpu-check (needs an NVIDIA GPU and the [gpu] extra).

    python bench/gpu_engines.py [--nodes 200000] [--vectors 200000] [--dim 384]

1. Hierarchical Leiden: graphwright's igraph engine and its cugraph engine on the same seeded
   graph (bench/leiden_scale.py's generator): seconds, top-level and leaf modularity.
2. Vector index: graphwright's faiss engine (exact, then HNSW) and cuvs engine (brute force, then
   CAGRA) on the same clustered unit vectors: build and search seconds, recall@10 against exact
   search. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from leiden_scale import memberships, planted_graph

from graphwright.cluster import hierarchical_leiden, make_engine, modularity
from graphwright.config import ClusterConfig, VectorConfig
from graphwright.vectors import build_index


def leiden(nodes: int) -> None:
    n, edges, weights = planted_graph(nodes, 10.0, 0.3, 42)
    print(f"graph: {n} nodes, {len(edges)} edges; max_cluster_size 25")
    print(f"{'engine':<10} {'seconds':>8} {'leaves':>7} {'Q top':>7} {'Q leaf':>7}")
    for name in ("cugraph", "igraph"):
        engine = make_engine(name)
        if name == "cugraph":  # the first call loads the CUDA libraries: not part of the timing
            engine._leiden(3, np.array([[0, 1], [1, 2]]), np.ones(2), resolution=1.0, seed=0, n_iterations=1)
        started = time.perf_counter()
        communities = hierarchical_leiden(n, edges, weights, ClusterConfig(engine=name, max_cluster_size=25), engine)
        seconds = time.perf_counter() - started
        top, leaf = memberships(n, [(c.level, c.members, not c.children) for c in communities])
        print(f"{name:<10} {seconds:>8.2f} {len(np.unique(leaf)):>7} {modularity(n, edges, weights, top):>7.4f} "
              f"{modularity(n, edges, weights, leaf):>7.4f}")


def vectors(count: int, dim: int, queries: int = 1000, k: int = 10) -> None:
    rng = np.random.default_rng(7)
    centers = rng.normal(size=(1000, dim))
    data = centers[rng.integers(0, len(centers), count)] + 0.5 * rng.normal(size=(count, dim))
    data = (data / np.linalg.norm(data, axis=1, keepdims=True)).astype(np.float32)
    q = data[rng.choice(count, queries, replace=False)] + 0.05 * rng.normal(size=(queries, dim)).astype(np.float32)
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    ids = [str(i) for i in range(count)]
    print(f"vectors: {count} x {dim}, {queries} queries, recall@{k} against exact faiss")
    print(f"{'index':<22} {'build s':>8} {'search s':>9} {'recall@10':>10}")
    truth = None
    for engine, threshold, label in (("faiss", count + 1, "faiss flat (exact)"), ("faiss", 1, "faiss HNSW"),
                                     ("cuvs", count + 1, "cuvs brute force"), ("cuvs", 1, "cuvs CAGRA")):
        started = time.perf_counter()
        index = build_index(ids, data, VectorConfig(engine=engine, hnsw_threshold=threshold))
        built = time.perf_counter() - started
        started = time.perf_counter()
        hits = index.search(q, k)
        searched = time.perf_counter() - started
        found = [{h for h, _ in row} for row in hits]
        truth = truth or found
        recall = np.mean([len(f & t) / k for f, t in zip(found, truth)])
        print(f"{label:<22} {built:>8.2f} {searched:>9.3f} {recall:>10.4f}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--vectors", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=384)
    args = parser.parse_args()
    leiden(args.nodes)
    vectors(args.vectors, args.dim)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
