"""leidenalg's reference implementation of Leiden (CPU; slower than igraph, with a seed argument)."""

from __future__ import annotations

import numpy as np

from graphwright.engines.graph.graphs import igraph_graph


class LeidenalgEngine:
    """leidenalg's reference implementation (slower; has its own seed argument). Partitions one
    graph per call: `groups` are handled by `partition_groups`, one call per graph."""

    name = "leidenalg"
    holds_gil = True

    def partition(self, n, edges, weights, *, resolution, seed, n_iterations, initial=None):
        graph = igraph_graph(n, edges)  # igraph first, imported without matplotlib (graphs.load_igraph)
        import leidenalg

        part = leidenalg.find_partition(
            graph, leidenalg.RBConfigurationVertexPartition, weights=np.asarray(weights, dtype=np.float64).tolist(),
            resolution_parameter=resolution, seed=seed, n_iterations=n_iterations,
            initial_membership=None if initial is None else initial.tolist(),
        )
        return np.asarray(part.membership, dtype=np.int64)
