"""Personalized PageRank by forward push (Andersen, Chung and Lang 2006), over a graph in CSR
form: the work depends on the reset vector and the tolerance, not on the size of the graph,
where a power iteration (igraph's prpack) touches every edge on every iteration (seconds at a
million passages).

Each node holds an estimate p and a residual r (r starts as the normalised reset vector). A
node whose residual exceeds `epsilon` times its degree is pushed: it keeps (1 - damping) of the
residual in p and hands the rest to its neighbours in proportion to the edge weights. All such
nodes are pushed at once per round, as numpy operations. At the end each node's remaining
residual adds the share a push would keep. Every node's score is within epsilon x its degree
of the exact value; a node without edges keeps all of its residual (as if it had a loop), so a
reset weight on a passage with no entities still ranks it.
"""

from __future__ import annotations

import numpy as np

from graphwright.util.numeric import spans

MAX_EDGE_VISITS = 5_000_000  # a bound on one query's work, whatever the tolerance and the graph


def personalized_pagerank(indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray, out_weight: np.ndarray,
                          seeds: np.ndarray, reset: np.ndarray, damping: float = 0.5,
                          epsilon: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, scores): the nodes with a nonzero estimate and their PageRank, with restarts to
    `seeds` in proportion to `reset`. `out_weight[u]` is the sum of u's edge weights."""
    n = len(indptr) - 1
    seeds = np.asarray(seeds, dtype=np.int64)
    reset = np.asarray(reset, dtype=np.float64)
    keep = (reset > 0) & (seeds >= 0) & (seeds < n)
    seeds, reset = seeds[keep], reset[keep]
    if not len(seeds):
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    residual = np.zeros(n, np.float64)
    estimate = np.zeros(n, np.float64)
    np.add.at(residual, seeds, reset / reset.sum())
    degree = np.diff(indptr)
    touched = np.zeros(n, dtype=bool)
    touched[seeds] = True
    frontier = np.unique(seeds)
    # a seed with little reset weight for its degree (a hub entity) is not worth its edges
    frontier = frontier[residual[frontier] > epsilon * np.maximum(degree[frontier], 1)]
    visits = 0
    while len(frontier) and visits < MAX_EDGE_VISITS:
        mass = residual[frontier]
        residual[frontier] = 0.0
        estimate[frontier] += (1.0 - damping) * mass
        starts, lengths = indptr[frontier], degree[frontier]
        lonely = lengths == 0
        if lonely.any():
            estimate[frontier[lonely]] += damping * mass[lonely]
        total = int(lengths.sum())
        if not total:
            break
        visits += total
        # positions of every edge of every frontier node, in one array
        offsets = spans(starts, lengths)
        targets = indices[offsets]
        with np.errstate(divide="ignore", invalid="ignore"):
            per_weight = np.where(lengths > 0, damping * mass / out_weight[frontier], 0.0)
        np.add.at(residual, targets, np.repeat(per_weight, lengths) * weights[offsets])
        touched[targets] = True
        over = targets[residual[targets] > epsilon * np.maximum(degree[targets], 1)]
        frontier = np.unique(over) if len(over) else over
    nodes = np.flatnonzero(touched)
    # what was never pushed still counts its first step: the estimate a push would have kept
    scores = estimate[nodes] + (1.0 - damping) * residual[nodes]
    nonzero = scores > 0
    return nodes[nonzero], scores[nonzero]
