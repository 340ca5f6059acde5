"""networkit's ParallelLeiden behind the cluster engine interface, for the top level of large
graphs (imported lazily).

Why a second CPU engine: the top level of the hierarchy is one Leiden run over the whole graph
and cannot be split into bins, so it bounds the stage. networkit's ParallelLeiden (Brandt-Tumescheit
et al.) took about 0.6x igraph's time there at higher modularity on one thread, and half that on
two (bench/leiden_scale.py; README, Scale).

The splits below the top level are a disjoint union of graphs, each to be partitioned by its own
modularity, while ParallelLeiden optimizes one modularity over the graph it is given. Scaling
each graph's edge weights by 1/m_g (m_g: its total weight) and the resolution by the number of
graphs makes the union's modularity, restricted to moves within one graph, that graph's own
modularity times a positive factor (`union_weights`), so every move ranks as it would alone.

What it does not do:
- It takes no starting partition, so a warm start (`initial`, from the previous communities)
  goes to the igraph engine: an update keeps its communities' ids rather than its speed.
- With more than one thread its moves race, so two runs may differ; `threads=1` (the default)
  is reproducible for a seed.
"""

from __future__ import annotations

import numpy as np

from graphwright.cluster import IgraphEngine


class NetworkitEngine:
    name = "networkit"
    batches_groups = True
    preload = ("networkit",)  # 1.5 s of imports (scipy, pandas, scikit-learn) per process otherwise

    def __init__(self, threads: int = 1):
        self.threads = threads
        self.cpu = IgraphEngine()

    def partition(self, n: int, edges: np.ndarray, weights: np.ndarray, *, resolution: float, seed: int,
                  n_iterations: int, initial: np.ndarray | None = None, groups: np.ndarray | None = None) -> np.ndarray:
        if initial is not None:
            return self.cpu.partition(n, edges, weights, resolution=resolution, seed=seed, n_iterations=n_iterations,
                                      initial=initial, groups=groups)
        edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        weights = np.asarray(weights, dtype=np.float64)
        if groups is not None:
            weights, resolution = union_weights(edges, weights, groups, resolution)
        return self._leiden(n, edges, weights, resolution=resolution, seed=seed, n_iterations=n_iterations)

    def _leiden(self, n: int, edges: np.ndarray, weights: np.ndarray, *, resolution: float, seed: int,
                n_iterations: int) -> np.ndarray:
        import networkit as nk

        graph = nk.graph.GraphFromCsr(_csr(n, edges, weights), directed=False, weighted=True)
        threads = nk.getMaxNumberOfThreads()
        nk.setNumberOfThreads(self.threads)  # a process-wide setting: restored below
        try:
            nk.setSeed(seed, False)  # False: the same seed on every thread, so one thread reproduces
            leiden = nk.community.ParallelLeiden(graph, randomize=True, iterations=n_iterations, gamma=resolution)
            leiden.run()
            return np.asarray(leiden.getPartition().getVector(), dtype=np.int64)
        finally:
            nk.setNumberOfThreads(threads)


def _csr(n: int, edges: np.ndarray, weights: np.ndarray):
    """Each edge once, as a row of a sparse matrix: networkit stores an undirected graph's entry
    from both ends (4x faster to build than GraphFromCoo's edge-by-edge insertion at 5M edges)."""
    from scipy.sparse import csr_matrix

    if len(edges) and (np.diff(edges[:, 0]) < 0).any():
        order = np.argsort(edges[:, 0], kind="stable")
        edges, weights = edges[order], weights[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(edges[:, 0], minlength=n))])
    return csr_matrix((weights, edges[:, 1], indptr), shape=(n, n))


def union_weights(edges: np.ndarray, weights: np.ndarray, groups: np.ndarray, resolution: float) -> tuple[np.ndarray, float]:
    """Edge weights and resolution under which one modularity over a disjoint union of graphs
    (`groups`: a graph label per node; edges join nodes of one graph) ranks moves within each
    graph as that graph's own modularity does.

    With weights scaled by s_g = c / m_g, the union's total is M = cG (G: graphs with edges), and
    a community inside graph g contributes (s_g / M) * (w_in - r' s_g K^2 / 4M) to the union's
    modularity at resolution r'. With r' = G r that is (1 / G m_g) * (w_in - r K^2 / 4 m_g): the
    graph's own modularity term, times a positive factor. c (the mean m_g) keeps weights near
    their original size."""
    edge_group = groups[edges[:, 0]]
    total = np.bincount(edge_group, weights, minlength=int(groups.max()) + 1 if len(groups) else 0)  # m_g
    with_edges = int((total > 0).sum())
    if not with_edges:
        return weights, resolution
    return weights * (total.sum() / with_edges / total[edge_group]), resolution * with_edges
