"""GPU engines against the CPU ones, for scripts/gpu-check (needs an NVIDIA GPU and the [gpu] extra).

    python bench/gpu_engines.py [--nodes 200000 1000000] [--vectors 500000] [--dim 384]

1. Hierarchical Leiden on bench/leiden_scale.py's seeded graphs: graphwright's cugraph engine, its
   igraph engine (levels below the top in one process per core) and, when installed,
   graspologic-native with Microsoft GraphRAG's arguments: seconds, top-level and leaf modularity.
2. Vector index: graphwright's faiss engine (exact, then HNSW) and cuvs engine (brute force, then
   CAGRA) on the same generated embedding-like unit vectors: build seconds, first-search
   seconds (kernel loading and compilation), search seconds for 1000 queries, recall@10 against
   exact search. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time

import numpy as np
from leiden_scale import planted_graph, run_graspologic, run_ours

from graphwright.config import VectorConfig
from graphwright.engines.graph import make_engine
from graphwright.engines.graph.graphs import modularity
from graphwright.engines.vectors import build_index

MAX_CLUSTER_SIZE, SEED, ITERATIONS = 25, 42, 2


def leiden(nodes: int) -> None:
    n, edges, weights = planted_graph(nodes, 10.0, 0.3, SEED)
    print(f"\ngraph: {n} nodes, {len(edges)} edges; max_cluster_size {MAX_CLUSTER_SIZE}, {os.cpu_count()} CPUs")
    print(f"{'engine':<28} {'seconds':>8} {'leaves':>7} {'Q top':>7} {'Q leaf':>7}")
    make_engine("cugraph")._leiden(3, np.array([[0, 1], [1, 2]]), np.ones(2), resolution=1.0, seed=0, n_iterations=1)
    runs = [("graphwright cugraph", lambda: run_ours(n, edges, weights, MAX_CLUSTER_SIZE, SEED, "cugraph", ITERATIONS, 1)),
            (f"graphwright igraph it{ITERATIONS}", lambda: run_ours(n, edges, weights, MAX_CLUSTER_SIZE, SEED, "igraph",
                                                                    ITERATIONS, os.cpu_count()))]
    if importlib.util.find_spec("graspologic_native"):
        runs.append(("graspologic-native", lambda: run_graspologic(n, edges, weights, MAX_CLUSTER_SIZE, SEED)))
    for label, run in runs:
        seconds, _, _, (top, leaf) = run()
        print(f"{label:<28} {seconds:>8.2f} {len(np.unique(leaf)):>7} {modularity(n, edges, weights, top):>7.4f} "
              f"{modularity(n, edges, weights, leaf):>7.4f}", flush=True)


def embeddings_like(count: int, dim: int, rng: np.random.Generator, intrinsic: int = 32) -> np.ndarray:
    """Unit vectors that lie near a low-dimensional subspace, as text embeddings do: clusters in
    `intrinsic` dimensions mapped into `dim`, plus a little noise. (Isotropic noise in all `dim`
    dimensions makes every neighbour of a cluster nearly equidistant, which measures ties.)"""
    centers = rng.normal(size=(1000, intrinsic))
    latent = centers[rng.integers(0, len(centers), count)] + 0.5 * rng.normal(size=(count, intrinsic))
    data = latent @ rng.normal(size=(intrinsic, dim)) + 0.05 * rng.normal(size=(count, dim))
    return (data / np.linalg.norm(data, axis=1, keepdims=True)).astype(np.float32)


def vectors(count: int, dim: int, queries: int = 1000, k: int = 10) -> None:
    rng = np.random.default_rng(7)
    data = embeddings_like(count, dim, rng)
    q = data[rng.choice(count, queries, replace=False)] + 0.02 * rng.normal(size=(queries, dim)).astype(np.float32)
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    ids = [str(i) for i in range(count)]
    print(f"\nvectors: {count} x {dim}, {queries} queries, recall@{k} against exact faiss")
    print(f"{'index':<22} {'build s':>8} {'first s':>8} {'search s':>9} {'recall@10':>10}")
    truth = None
    for engine, threshold, label in (("faiss", count + 1, "faiss flat (exact)"), ("faiss", 1, "faiss HNSW"),
                                     ("cuvs", count + 1, "cuvs brute force"), ("cuvs", 1, "cuvs CAGRA")):
        started = time.perf_counter()
        index = build_index(ids, data, VectorConfig(engine=engine, hnsw_threshold=threshold))
        built = time.perf_counter() - started
        started = time.perf_counter()
        index.search(q[:1], k)  # the first search loads (cuVS: compiles) its kernels
        first = time.perf_counter() - started
        started = time.perf_counter()
        hits = index.search(q, k)
        searched = time.perf_counter() - started
        found = [{h for h, _ in row} for row in hits]
        truth = truth or found
        recall = np.mean([len(f & t) / k for f, t in zip(found, truth)])
        print(f"{label:<22} {built:>8.2f} {first:>8.3f} {searched:>9.3f} {recall:>10.4f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--vectors", type=int, default=500_000)
    parser.add_argument("--dim", type=int, default=384)
    args = parser.parse_args()
    for nodes in args.nodes:
        leiden(nodes)
    vectors(args.vectors, args.dim)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
