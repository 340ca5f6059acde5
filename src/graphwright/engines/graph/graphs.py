"""igraph graphs from edge arrays, and the helpers every graph engine shares."""

from __future__ import annotations

import itertools
import sys
import threading

import numpy as np

_IMPORTING = threading.Lock()
_LOADED = None  # igraph once its import has finished (sys.modules holds it from the import's start)


def load_igraph():
    """The igraph module, imported without matplotlib. python-igraph imports matplotlib.pyplot
    for its plotting backends whenever matplotlib is installed (graphwright's cost plots install
    it): 0.4-0.7 s of every process that clusters, on work it never plots (a 0.1% update at 145k
    chunks is 20 s). With matplotlib hidden, igraph's drawing takes its stand-in: igraph's own
    plots are unavailable in a process that imported it here first; matplotlib itself is not.
    Threads wait for one import: sys.modules holds igraph half-initialized while it runs (the
    cluster stage's check and its partitions start side by side)."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    with _IMPORTING:
        if _LOADED is None:
            hidden = "matplotlib" not in sys.modules and "igraph" not in sys.modules
            if hidden:
                sys.modules["matplotlib"] = None  # an import of it raises ImportError meanwhile
            try:
                import igraph
            finally:
                if hidden and "matplotlib" in sys.modules and sys.modules["matplotlib"] is None:
                    del sys.modules["matplotlib"]
            _LOADED = igraph
    return _LOADED


def igraph_graph(n: int, edges: np.ndarray):
    ig = load_igraph()
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    graph = ig.Graph(n=n, directed=False)
    # python-igraph's abi3 wheel converts pairs one by one: a stream of tuples of Python ints,
    # made from 1M-edge slices, converts in 140 ns per edge, the numpy array in 205 ns
    graph.add_edges(itertools.chain.from_iterable(
        zip(edges[i:i + 1_000_000, 0].tolist(), edges[i:i + 1_000_000, 1].tolist()) for i in range(0, len(edges), 1_000_000)))
    return graph


def dense_labels(labels: np.ndarray, within: np.ndarray | None = None) -> np.ndarray:
    """Relabel to 0..k-1 (leidenalg rejects a label >= the number of nodes). With `within`, the
    label is the pair (labels, within): equal labels in two graphs of a union stay apart."""
    labels = np.asarray(labels, dtype=np.int64)
    if within is not None:
        within = np.asarray(within, dtype=np.int64)
        labels = labels * (int(within.max()) + 1) + within if len(labels) else labels
    return np.unique(labels, return_inverse=True)[1].reshape(-1).astype(np.int64)


def modularity(n: int, edges: np.ndarray, weights: np.ndarray, membership: np.ndarray, resolution: float = 1.0) -> float:
    """Weighted modularity of a flat partition, igraph's definition, in numpy: a community's share
    of twice its inner weight less `resolution` times the square of its share of the strength
    (resolution 1: the modularity reports quote; another: what Leiden at that resolution optimizes)."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    weights = np.asarray(weights, dtype=np.float64)
    membership = np.asarray(membership, dtype=np.int64)
    total = 2 * weights.sum()
    if not n or total <= 0:
        return float("nan")
    labels = dense_labels(membership)
    k = int(labels.max()) + 1
    a, b = labels[edges[:, 0]], labels[edges[:, 1]]
    inner = np.bincount(a[a == b], weights[a == b], k) * 2
    strength = np.bincount(a, weights, k) + np.bincount(b, weights, k)
    return float(np.sum(inner / total - resolution * (strength / total) ** 2))
