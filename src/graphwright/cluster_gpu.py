"""cuGraph's Leiden behind the cluster engine interface (the [gpu] extra; imported lazily).

Written against cuGraph's documented API (`cugraph.leiden(G, max_iter, resolution, random_state,
theta)` on a `cugraph.Graph` built from a cudf edge list) and run only by the `gpu` tests and
scripts/gpu-check: no GPU was at hand where it was written.

What cuGraph does not guarantee: `random_state` seeds Leiden's refinement, but the GPU's parallel
moves and floating-point reductions are not ordered, so two runs on the same graph may differ
slightly (igraph and leidenalg are reproducible with a seed). `n_iterations` has no cuGraph
counterpart (its `max_iter` bounds the levels of one run; its default is kept), and cuGraph's
Leiden takes no starting partition, so a warm start only applies to the part run by igraph.

The hierarchy recursion stays in cluster.hierarchical_leiden. Below the top level most
communities to split are small, and one GPU call per community would cost more in launches
than it saves, so graphs of a level with fewer than `gpu_min_edges` edges are partitioned
together by the igraph engine (each by its own modularity, as everywhere else).
"""

from __future__ import annotations

import numpy as np

from graphwright.cluster import IgraphEngine, dense_labels


class CugraphEngine:
    name = "cugraph"
    batches_groups = True

    def __init__(self, gpu_min_edges: int = 100_000):
        self.gpu_min_edges = gpu_min_edges
        self.cpu = IgraphEngine()

    def _leiden(self, n: int, edges: np.ndarray, weights: np.ndarray, *, resolution: float, seed: int,
                n_iterations: int) -> np.ndarray:
        import cudf
        import cugraph

        labels = np.arange(n, dtype=np.int64)  # a node without edges is a community of its own
        if not len(edges):
            return labels
        frame = cudf.DataFrame({"src": edges[:, 0].astype(np.int32), "dst": edges[:, 1].astype(np.int32),
                                "weight": weights.astype(np.float32)})
        graph = cugraph.Graph(directed=False)
        graph.from_cudf_edgelist(frame, source="src", destination="dst", edge_attr="weight", renumber=False)
        parts, _ = cugraph.leiden(graph, resolution=resolution, random_state=seed)
        vertex = parts["vertex"].to_numpy()
        labels[vertex] = parts["partition"].to_numpy().astype(np.int64) + n  # apart from the isolated nodes' labels
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
