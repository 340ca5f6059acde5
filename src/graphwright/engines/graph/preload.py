"""Imported by the cluster pools' forkserver before it forks a worker: igraph, loaded once and
without matplotlib (graphs.load_igraph), and scipy.sparse (sorted_edges' counting passes, 0.3 s
to import), for every worker forked from it."""

import scipy.sparse  # noqa: F401

from graphwright.engines.graph.graphs import load_igraph

load_igraph()
