"""Cluster: hierarchical Leiden over the entity graph (plain functions, any graph engine).

The hierarchy contract, the same for every engine: level 0 partitions all entities (isolated
entities and small components are communities of their own); a community larger than
`max_cluster_size` is split by Leiden on its induced subgraph into children at the next level,
recursively, until every leaf fits or Leiden cannot split it further. An engine only has to
partition one graph; the recursion lives here. An engine that sets `batches_groups` also takes
`groups` (a disjoint union of graphs, each to be partitioned by its own modularity), so that the
splits of one level are a few engine runs (igraph: CPM with per-graph node weights), one per bin
of about BIN_EDGES edges, spread over a process pool; other engines get one call per community.
Engines: graphwright.engines.graph (igraph, leidenalg; cugraph on GPU).

Measured with bench/leiden_scale.py (n_iterations 1, as GraphRAG calls graspologic; median of
3-5 seeds), side by side with graspologic-native: 5.3 s against 12.0 s on the entity graph of a
1.2M-chunk index (52k entities, 5.2M relationships), 0.75 s against 1.72 s on that of a 121k-chunk
index (967k relationships), 13.7 s against 28.3 s on a generated 1M-node / 5M-edge graph. The top
level is one igraph run and cannot be split; the bins can. networkit's ParallelLeiden runs the
top level in about 0.6x igraph's time, but does not always terminate
(bench/networkit_leiden_check.py), so it is not an engine.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from graphwright.config import ClusterConfig
from graphwright.engines.graph.graphs import dense_labels
from graphwright.util.numeric import pair_order

# Each level's splits are cut into bins of about this many edges, partitioned independently (bin
# k seeded with seed + k). The bins depend only on the graph, never on how many processes run them,
# so the hierarchy is the same on a laptop and on a 64-core driver; a graph below one bin is
# partitioned exactly as one engine call would. Bins of 100k edges keep two processes busy to the
# end of a level (a level of a 200k-node / 1M-edge graph: 1.63 s with 100k bins, 1.97 s with 500k).
BIN_EDGES = 100_000
# A pool only for graphs above this many bins' worth of edges: below that, the top level ends
# before the pool's processes are ready (generated graphs, medians of 5 seeds: 200k edges 0.22 s
# alone, 0.37 s with two processes; 400k edges 0.56 s alone, 0.48 s with two).
POOL_MIN_BINS = 3


def partition_groups(engine, n: int, edges: np.ndarray, weights: np.ndarray, groups: np.ndarray, *,
                     resolution: float, seed: int, n_iterations: int, initial: np.ndarray | None = None,
                     pool=None, usage: dict | None = None) -> np.ndarray:
    """Partition each graph of a disjoint union on its own (labels distinct across graphs). An
    engine whose `partition` accepts `groups` gets one call per bin of graphs (in `pool`, a
    concurrent.futures executor, when given; the CPU seconds its processes spent are added to
    usage["worker_cpu_s"]); others get one call per graph."""
    options = {"resolution": resolution, "n_iterations": n_iterations}
    if not getattr(engine, "batches_groups", False):
        return _partition_each(engine, n, edges, weights, groups, seed=seed, initial=initial, **options)
    jobs = list(_bins(n, edges, weights, groups, initial))
    args = [(engine, *job[1:], {**options, "seed": seed + k}) for k, job in enumerate(jobs)]
    pooled = pool is not None and len(jobs) > 1
    results = None
    if pooled:
        try:
            results = list(pool.map(_partition_bin, *zip(*args)))
        except BrokenProcessPool:  # e.g. a script without `if __name__ == "__main__"`: the same bins, here
            pooled = False
    if results is None:
        results = (_partition_bin(*a) for a in args)
    labels = np.empty(n, dtype=np.int64)
    offset = 0
    for (nodes, *_), (part, cpu) in zip(jobs, results):
        if pooled and usage is not None:
            usage["worker_cpu_s"] = usage.get("worker_cpu_s", 0.0) + cpu
        labels[nodes] = part + offset
        offset += int(part.max()) + 1 if len(part) else 0
    return labels


def _bins(n: int, edges: np.ndarray, weights: np.ndarray, groups: np.ndarray, initial: np.ndarray | None):
    """(nodes, n, edges, weights, groups, initial) per bin, in local ids: consecutive graphs of
    the union until a bin holds BIN_EDGES edges (a larger graph is a bin of its own)."""
    count = int(groups.max()) + 1 if n else 0
    edge_count = np.bincount(groups[edges[:, 0]], minlength=count) if len(edges) else np.zeros(count, np.int64)
    bin_of_group = np.zeros(count, dtype=np.int64)
    filled, current = 0, 0
    for g, m in enumerate(edge_count.tolist()):
        if filled and filled + m > BIN_EDGES:
            current, filled = current + 1, 0
        bin_of_group[g] = current
        filled += m
    if current == 0:
        yield np.arange(n), n, edges, weights, groups, initial
        return
    # a bin holds consecutive graphs: its labels are dense once its first one is subtracted
    first_group = np.searchsorted(bin_of_group, np.arange(current + 1))
    node_bin = bin_of_group[groups]
    node_order, node_bounds = _grouped(node_bin, current + 1)  # ascending within a bin
    edge_order, edge_bounds = _grouped(node_bin[edges[:, 0]], current + 1)
    local = np.empty(n, dtype=np.int64)
    for b in range(current + 1):
        nodes = node_order[node_bounds[b]:node_bounds[b + 1]]
        local[nodes] = np.arange(len(nodes))  # local ids keep the edges sorted
        mine = edge_order[edge_bounds[b]:edge_bounds[b + 1]]
        yield (nodes, len(nodes), local[np.take(edges, mine, axis=0)], weights[mine], groups[nodes] - first_group[b],
               None if initial is None else dense_labels(initial[nodes]))


def _grouped(labels: np.ndarray, count: int) -> tuple[np.ndarray, list[int]]:
    """Positions ordered by label (stable), and where each label's run starts and ends."""
    order = np.argsort(labels, kind="stable")
    return order, np.searchsorted(labels[order], np.arange(count + 1)).tolist()


def _partition_bin(engine, n, edges, weights, groups, initial, options) -> tuple[np.ndarray, float]:
    """Dense labels for one bin, and the CPU seconds they took (module level, for a process pool)."""
    started = time.process_time()
    labels = engine.partition(n, edges, weights, initial=initial, groups=groups, **options)
    return dense_labels(groups, labels), time.process_time() - started  # a label never spans two graphs


def _partition_each(engine, n, edges, weights, groups, *, seed, initial, **options) -> np.ndarray:
    """One engine call per graph of the union."""
    count = int(groups.max()) + 1
    order, node_bounds = _grouped(groups, count)
    edge_order, edge_bounds = _grouped(groups[edges[:, 0]], count)
    labels = np.empty(n, dtype=np.int64)
    local = np.empty(n, dtype=np.int64)
    offset = 0
    for g in range(count):
        nodes = order[node_bounds[g]:node_bounds[g + 1]]
        mine = edge_order[edge_bounds[g]:edge_bounds[g + 1]]
        local[nodes] = np.arange(len(nodes))
        part = engine.partition(len(nodes), local[edges[mine]], weights[mine], seed=seed,
                                initial=None if initial is None else dense_labels(initial[nodes]), **options)
        labels[nodes] = dense_labels(part) + offset
        offset = int(labels[nodes].max()) + 1
    return labels


@dataclass
class Community:
    level: int
    members: np.ndarray  # node indices, sorted
    parent: int | None  # index into the result list
    children: list[int]


def _relabel(membership: np.ndarray) -> list[np.ndarray]:
    """Groups of node positions by label, ordered by their smallest member (engine-independent)."""
    order = np.argsort(membership, kind="stable")  # positions stay ascending within a label
    starts = np.flatnonzero(np.diff(membership[order], prepend=-1)) if len(order) else np.empty(0, np.int64)
    bounds = np.append(starts, len(order)).tolist()
    ranked = np.argsort(order[starts], kind="stable").tolist()  # order[start]: the label's smallest member
    # slices of `order`, not np.split: that costs 4 us a group in Python (0.4 s for 100k groups)
    return [order[bounds[i]:bounds[i + 1]] for i in ranked]


def hierarchical_leiden(n: int, edges: np.ndarray, weights: np.ndarray, config: ClusterConfig, engine,
                        initial: np.ndarray | None = None, workers: int = 1, usage: dict | None = None) -> list[Community]:
    """The hierarchy over nodes 0..n-1 with undirected weighted `edges` (shape [m, 2]).
    `initial` (optional, shape [levels, n]) gives each node a starting label per level; every
    split starts from those labels restricted to the nodes it splits.

    Level by level: all communities to split at a level are partitioned together (one engine
    run per bin of their disjoint union, each by its own modularity; bins run in `workers`
    processes; their CPU seconds go to usage["worker_cpu_s"]), then the result is listed
    depth-first, each community followed by its descendants."""
    with _pool(workers, len(edges)) as pool:
        levels = _levels(n, edges, weights, config, engine, initial, pool, usage)
    return listing(levels)


def listing(levels: list[list[tuple[np.ndarray, int | None]]]) -> list[Community]:
    """The communities of `levels` (per level: members, index of the parent in the level above)
    depth-first, each community followed by its descendants."""
    if not levels:
        return []
    # each community's path of indices from its level-0 ancestor (-1 below its own level):
    # depth-first order is the paths' lexicographic order, a parent (-1) before its children
    paths = []
    for level, nodes in enumerate(levels):
        path = np.full((len(nodes), len(levels)), -1, dtype=np.int64)
        path[:, level] = np.arange(len(nodes))
        if level:
            path[:, :level] = paths[-1][np.fromiter((p for _, p in nodes), np.int64, len(nodes)), :level]
        paths.append(path)
    path = np.concatenate(paths)
    order = np.lexsort(path.T[::-1])
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    position = position.tolist()
    start = np.cumsum([0] + [len(nodes) for nodes in levels]).tolist()  # the row of each level's first community
    parent_row = [start[level - 1] + path[start[level]:start[level + 1], level - 1] for level in range(1, len(levels))]
    made = [Community(level, members, None, []) for level, nodes in enumerate(levels) for members, _ in nodes]
    for row, up in zip(range(start[1], len(made)), np.concatenate(parent_row or [[]]).astype(np.int64).tolist()):
        made[row].parent = position[up]
        made[up].children.append(position[row])  # rows ascending: children in depth-first order
    return [made[i] for i in order.tolist()]


@contextmanager
def _pool(workers: int, edges: int, lazy: bool = False):
    """Processes for the bins of a level, when the graph is large enough to repay starting them.
    `lazy`: started by the first level that has bins to share (an update's splits rarely fill
    two bins: starting the pool cost it 1.2 s of the driver at 145k chunks)."""
    if workers <= 1 or edges <= POOL_MIN_BINS * BIN_EDGES:
        yield None
        return
    if lazy:
        pool = _LazyPool(workers)
        try:
            yield pool
        finally:
            pool.shutdown()
        return
    with _start_pool(workers) as pool:
        for _ in range(workers):  # start the processes now, while the top level runs on the driver
            pool.submit(int)
        yield pool


def _start_pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(workers, mp_context=_context())


def _context():
    # forkserver: the driver may hold threads (Delta's runtime, Ray) that a plain fork would copy
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["graphwright.stages.cluster.hierarchy", "graphwright.engines.graph.preload"])
    return context


_SERVER = {"started": False}


def start_forkserver() -> None:
    """Start the pools' forkserver and its preload (1 s) in the background, so that a pool
    started later forks at once: its first submit would wait for them. Nothing where processes
    cannot fork from a server (the pools then fail to start and their callers do without)."""
    import threading
    from multiprocessing import forkserver

    try:
        _context()
    except (OSError, ValueError):  # no forkserver on this platform
        return
    threading.Thread(target=forkserver.ensure_running, name="forkserver-start", daemon=True).start()
    _SERVER["started"] = True


def forkserver_started() -> bool:
    """Whether this process started the forkserver (start_forkserver)."""
    return _SERVER["started"]


class _LazyPool:
    """A process pool that starts with its first map."""

    def __init__(self, workers: int):
        self.workers, self.pool = workers, None

    def map(self, fn, *iterables):
        if self.pool is None:
            self.pool = _start_pool(self.workers)
        return self.pool.map(fn, *iterables)

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def sorted_edges(n: int, edges: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The edges (and their weights) in (source, target) order, as the top level is partitioned:
    igraph indexes sorted edges about twice as fast."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    order = pair_order(edges[:, 0], edges[:, 1], n, n)  # two counting passes (2.26M edges at 1.2M chunks)
    return np.take(edges, order, axis=0), np.asarray(weights, dtype=np.float64)[order]  # take: 10x edges[order] on 2-D rows


def _levels(n, edges, weights, config: ClusterConfig, engine, initial, pool, usage) -> list[list[tuple[np.ndarray, int | None]]]:
    """Per level: (members, index of the parent in the previous level's list)."""
    if not n:
        return []
    edges, weights = sorted_edges(n, edges, weights)  # every level below keeps this order
    options = {"resolution": config.resolution, "n_iterations": config.n_iterations}

    def start(level: int, nodes: np.ndarray, groups: np.ndarray | None) -> np.ndarray | None:
        if initial is None or level >= len(initial):
            return None
        return dense_labels(initial[level][nodes], groups)

    membership = engine.partition(n, edges, weights, seed=config.seed, initial=start(0, np.arange(n), None), **options)
    levels: list[list[tuple[np.ndarray, int | None]]] = [[(g, None) for g in _relabel(membership)]]
    while len(levels) < config.max_levels:
        level = len(levels)
        split = [i for i, (members, _) in enumerate(levels[-1]) if len(members) > config.max_cluster_size]
        if not split:
            break
        group_of = np.full(n, -1, dtype=np.int64)
        group_of[np.concatenate([levels[-1][i][0] for i in split])] = np.repeat(
            np.arange(len(split)), [len(levels[-1][i][0]) for i in split])
        nodes = np.flatnonzero(group_of >= 0)  # ascending, so local ids keep the edges sorted
        groups = group_of[nodes]
        ends = group_of[edges]
        keep = (ends[:, 0] >= 0) & (ends[:, 0] == ends[:, 1])
        edges, weights = edges[keep], weights[keep]  # deeper levels only split inside these communities
        local = np.full(n, -1, dtype=np.int64)
        local[nodes] = np.arange(len(nodes))
        membership = partition_groups(engine, len(nodes), local[edges], weights, groups, seed=config.seed + level,
                                      initial=start(level, nodes, groups), pool=pool, usage=usage, **options)
        children = _relabel(membership)
        parent_of = groups[[c[0] for c in children]]
        count = np.bincount(parent_of, minlength=len(split))
        # a community Leiden cannot split stays a leaf
        levels.append([(nodes[c], split[p]) for c, p in zip(children, parent_of.tolist()) if count[p] >= 2])
        if not levels[-1]:
            levels.pop()
            break
    return levels


