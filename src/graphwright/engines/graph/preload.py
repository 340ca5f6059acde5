"""Imported by the cluster pools' forkserver before it forks a worker: igraph, loaded once and
without matplotlib (graphs.load_igraph), for every worker forked from it."""

from graphwright.engines.graph.graphs import load_igraph

load_igraph()
