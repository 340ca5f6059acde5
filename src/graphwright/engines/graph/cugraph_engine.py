"""cuGraph's Leiden behind the cluster engine interface (the [gpu] extra; imported lazily).

Calls pylibcugraph, cuGraph's own low-level Python layer (`SGGraph` from device arrays, then
`leiden(handle, random_state, graph, max_level, resolution, theta, do_expensive_check)`), so the
engine needs neither cuDF nor the `cugraph` package with its pandas/numba pins. Written against
pylibcugraph 26.10 and run by the `gpu` tests and scripts/gpu-check.

What cuGraph does not guarantee: `random_state` seeds Leiden's refinement, but the GPU's parallel
moves and floating-point reductions are not ordered, so two runs on the same graph may differ
slightly (igraph and leidenalg are reproducible with a seed). `n_iterations` has no cuGraph
counterpart (`max_level` bounds the levels of one run; cuGraph's Python default, 100, is kept),
and cuGraph's Leiden takes no starting partition, so a warm start only applies to the part run
by igraph.

The hierarchy recursion stays in stages.cluster.hierarchy. Below the top level most
communities to split are small, and one GPU call per community would cost more in launches
than it saves, so graphs of a level with fewer than `gpu_min_edges` edges are partitioned
together by the igraph engine (each by its own modularity, as everywhere else).
"""

from __future__ import annotations

import numpy as np

from graphwright.engines.graph.graphs import dense_labels
from graphwright.engines.graph.igraph_engine import IgraphEngine

MAX_LEVEL = 100  # cugraph.leiden's default max_iter


class CugraphEngine:
    name = "cugraph"
    batches_groups = True
    holds_gil = False  # below gpu_min_edges it is igraph, but a graph that small is done in a thread

    def __init__(self, gpu_min_edges: int = 100_000):
        self.gpu_min_edges = gpu_min_edges
        self.cpu = IgraphEngine()

    def _leiden(self, n: int, edges: np.ndarray, weights: np.ndarray, *, resolution: float, seed: int,
                n_iterations: int) -> np.ndarray:
        import cupy as cp
        import pylibcugraph as plc

        labels = np.arange(n, dtype=np.int64)  # a node without edges is a community of its own
        if not len(edges):
            return labels
        # An undirected graph is given to cuGraph as a symmetric one: each edge in both directions.
        src = np.concatenate([edges[:, 0], edges[:, 1]]).astype(np.int32)
        dst = np.concatenate([edges[:, 1], edges[:, 0]]).astype(np.int32)
        handle = plc.ResourceHandle()
        graph = plc.SGGraph(handle, plc.GraphProperties(is_symmetric=True, is_multigraph=False),
                            cp.asarray(src), cp.asarray(dst),
                            weight_array=cp.asarray(np.concatenate([weights, weights]).astype(np.float32)),
                            store_transposed=False, renumber=False, do_expensive_check=False)
        vertices, parts, _ = plc.leiden(handle, seed, graph, MAX_LEVEL, resolution, 1.0, False)
        labels[cp.asnumpy(vertices)] = cp.asnumpy(parts).astype(np.int64) + n  # apart from the isolated nodes' labels
        return labels

    def partition(self, n: int, edges: np.ndarray, weights: np.ndarray, *, resolution: float, seed: int,
                  n_iterations: int, initial: np.ndarray | None = None, groups: np.ndarray | None = None) -> np.ndarray:
        edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        weights = np.asarray(weights, dtype=np.float64)
        if groups is None:
            if len(edges) < self.gpu_min_edges:
                return self.cpu.partition(n, edges, weights, resolution=resolution, seed=seed,
                                          n_iterations=n_iterations, initial=initial)
            return self._leiden(n, edges, weights, resolution=resolution, seed=seed, n_iterations=n_iterations)
        edge_group = groups[edges[:, 0]]
        big = np.flatnonzero(np.bincount(edge_group, minlength=int(groups.max()) + 1) >= self.gpu_min_edges)
        on_gpu = np.isin(groups, big)
        labels = np.empty(n, dtype=np.int64)
        offset = 0
        for g in big.tolist():
            nodes = np.flatnonzero(groups == g)
            local = np.full(n, -1, dtype=np.int64)
            local[nodes] = np.arange(len(nodes))
            mine = edge_group == g
            part = self._leiden(len(nodes), local[edges[mine]], weights[mine], resolution=resolution, seed=seed,
                                n_iterations=n_iterations)
            labels[nodes] = np.unique(part, return_inverse=True)[1] + offset
            offset = int(labels[nodes].max()) + 1
        rest = np.flatnonzero(~on_gpu)
        if len(rest):
            local = np.full(n, -1, dtype=np.int64)
            local[rest] = np.arange(len(rest))
            mine = ~np.isin(edge_group, big)
            part = self.cpu.partition(len(rest), local[edges[mine]], weights[mine], resolution=resolution, seed=seed,
                                      n_iterations=n_iterations, initial=None if initial is None else dense_labels(initial[rest]),
                                      groups=np.unique(groups[rest], return_inverse=True)[1])
            labels[rest] = part + offset
        return labels
