"""igraph's C implementation of Leiden: the default graph engine (CPU)."""

from __future__ import annotations

import random
import threading

import numpy as np

from graphwright.engines.graph.graphs import igraph_graph, load_igraph


def group_node_weights(n: int, edges: np.ndarray, weights: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Node weights that make CPM on a disjoint union of graphs equal to modularity on each graph:
    k_i / sqrt(2 m_g), with k_i the node's strength and m_g its graph's total edge weight, so that
    the CPM penalty n_i n_j = k_i k_j / 2m_g is modularity's null model within every graph (Leiden
    never puts nodes of different components in one community, so pairs across graphs never count)."""
    strength = np.bincount(edges[:, 0], weights, n) + np.bincount(edges[:, 1], weights, n)
    total = np.bincount(groups, strength)  # 2 m_g
    return strength / np.sqrt(np.where(total > 0, total, 1.0))[groups]


# igraph's random generator is per thread, and python-igraph makes it Python's `random` only in
# the thread that imported igraph: a partition in another thread (an update's fresh top level)
# drew from igraph's own, unseeded, and an update's communities (and so its reports) varied from
# run to run. Each partition sets it, and seeds and draws from the shared `random` alone.
_RANDOM = threading.Lock()


class IgraphEngine:
    """igraph's C implementation of Leiden, optimizing modularity."""

    name = "igraph"
    batches_groups = True  # `partition` takes `groups`: one Leiden run per level of the hierarchy
    holds_gil = True  # and its RNG is Python's `random`, behind _RANDOM: one partition at a time per process

    def partition(self, n: int, edges: np.ndarray, weights: np.ndarray, *, resolution: float, seed: int,
                  n_iterations: int, initial: np.ndarray | None = None, groups: np.ndarray | None = None,
                  strength: np.ndarray | None = None, total: float | None = None) -> np.ndarray:
        """Labels per node. With `groups` (a graph label per node; `edges` only join nodes of one
        graph) every graph is partitioned by its own modularity, all in one Leiden run. With
        `strength` and `total` (each node's weighted degree in a larger graph, and that graph's
        2m), the nodes are partitioned by the larger graph's modularity, as if every node outside
        stayed where it is (CPM with node weights k_i / sqrt(2m))."""
        ig = load_igraph()

        graph = igraph_graph(n, edges)
        options = {"edge_weights": np.asarray(weights, dtype=np.float64).tolist(), "n_iterations": n_iterations,
                   "initial_membership": None if initial is None else initial.tolist(), "beta": 0.01}
        if strength is not None:
            options["node_weights"] = (np.asarray(strength, dtype=np.float64) / np.sqrt(max(total or 0.0, 1e-300))).tolist()
        elif groups is not None:
            node_weights = group_node_weights(n, np.asarray(edges, dtype=np.int64).reshape(-1, 2),
                                              np.asarray(weights, dtype=np.float64), groups)
            options["node_weights"] = node_weights.tolist()
        # GraphBase's method, not Graph.community_leiden: that wraps the labels in a VertexClustering,
        # 0.2 s of Python per million nodes spent on a max() this engine does not need
        with _RANDOM:  # seeded, and drawn from by this partition alone: reproducible
            ig.set_random_number_generator(random)
            random.seed(seed)
            membership, _ = ig.GraphBase.community_leiden(graph, resolution=resolution,
                                                          normalize_resolution=groups is None and strength is None, **options)
        return np.asarray(membership, dtype=np.int64)
