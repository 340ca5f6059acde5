"""Cluster: hierarchical Leiden over the entity graph (a fan-in stage).

The hierarchy contract, the same for every engine: level 0 partitions all entities (isolated
entities and small components are communities of their own); a community larger than
`max_cluster_size` is split by Leiden on its induced subgraph into children at the next level,
recursively, until every leaf fits or Leiden cannot split it further. An engine only has to
partition one graph; the recursion lives here. An engine that sets `batches_groups` also takes
`groups` (a disjoint union of graphs, each to be partitioned by its own modularity), so that all
the splits of one level are one engine run (igraph: CPM with per-graph node weights); other
engines get one call per community. Engines: igraph, leidenalg (CPU), cugraph (cluster_gpu).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from graphwright import ids, tables
from graphwright.config import ClusterConfig


def _igraph(n: int, edges: np.ndarray):
    import igraph as ig

    graph = ig.Graph(n=n, directed=False)
    graph.add_edges(np.asarray(edges, dtype=np.int64).reshape(-1, 2))  # a numpy array: no Python list of 1M pairs
    return graph


def group_node_weights(n: int, edges: np.ndarray, weights: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Node weights that make CPM on a disjoint union of graphs equal to modularity on each graph:
    k_i / sqrt(2 m_g), with k_i the node's strength and m_g its graph's total edge weight, so that
    the CPM penalty n_i n_j = k_i k_j / 2m_g is modularity's null model within every graph (Leiden
    never puts nodes of different components in one community, so pairs across graphs never count)."""
    strength = np.bincount(edges[:, 0], weights, n) + np.bincount(edges[:, 1], weights, n)
    total = np.bincount(groups, strength)  # 2 m_g
    return strength / np.sqrt(np.where(total > 0, total, 1.0))[groups]


class IgraphEngine:
    """igraph's C implementation of Leiden, optimizing modularity."""

    name = "igraph"
    batches_groups = True  # `partition` takes `groups`: one Leiden run per level of the hierarchy

    def partition(self, n: int, edges: np.ndarray, weights: np.ndarray, *, resolution: float, seed: int,
                  n_iterations: int, initial: np.ndarray | None = None, groups: np.ndarray | None = None) -> np.ndarray:
        """Labels per node. With `groups` (a graph label per node; `edges` only join nodes of one
        graph) every graph is partitioned by its own modularity, all in one Leiden run."""
        graph = _igraph(n, edges)
        # igraph draws from Python's `random`; seeding it makes the partition reproducible
        random.seed(seed)
        options = {"weights": np.asarray(weights, dtype=np.float64).tolist(), "n_iterations": n_iterations,
                       "initial_membership": None if initial is None else initial.tolist()}
        if groups is None:
            part = graph.community_leiden(objective_function="modularity", resolution=resolution, **options)
        else:
            node_weights = group_node_weights(n, np.asarray(edges, dtype=np.int64).reshape(-1, 2),
                                              np.asarray(weights, dtype=np.float64), groups)
            part = graph.community_leiden(objective_function="CPM", resolution=resolution,
                                          node_weights=node_weights.tolist(), **options)
        return np.asarray(part.membership, dtype=np.int64)


class LeidenalgEngine:
    """leidenalg's reference implementation (slower; has its own seed argument). Partitions one
    graph per call: `groups` are handled by `partition_groups`, one call per graph."""

    name = "leidenalg"

    def partition(self, n, edges, weights, *, resolution, seed, n_iterations, initial=None):
        import leidenalg

        graph = _igraph(n, edges)
        part = leidenalg.find_partition(
            graph, leidenalg.RBConfigurationVertexPartition, weights=np.asarray(weights, dtype=np.float64).tolist(),
            resolution_parameter=resolution, seed=seed, n_iterations=n_iterations,
            initial_membership=None if initial is None else initial.tolist(),
        )
        return np.asarray(part.membership, dtype=np.int64)


def make_engine(name: str):
    if name == "igraph":
        return IgraphEngine()
    if name == "leidenalg":
        return LeidenalgEngine()
    if name == "cugraph":
        from graphwright.cluster_gpu import CugraphEngine

        return CugraphEngine()
    raise ValueError(f"unknown graph engine {name!r}")


def partition_groups(engine, n: int, edges: np.ndarray, weights: np.ndarray, groups: np.ndarray, *,
                     resolution: float, seed: int, n_iterations: int, initial: np.ndarray | None = None) -> np.ndarray:
    """Partition each graph of a disjoint union on its own (labels distinct across graphs). An
    engine whose `partition` accepts `groups` does it in one call; others get one call per graph."""
    if getattr(engine, "batches_groups", False):
        labels = engine.partition(n, edges, weights, resolution=resolution, seed=seed, n_iterations=n_iterations,
                                  initial=initial, groups=groups)
        return dense_labels(groups, labels)  # a label never spans two graphs
    count = int(groups.max()) + 1
    order = np.argsort(groups, kind="stable")
    node_bounds = np.searchsorted(groups[order], np.arange(count + 1))
    edge_groups = groups[edges[:, 0]]
    edge_order = np.argsort(edge_groups, kind="stable")
    edge_bounds = np.searchsorted(edge_groups[edge_order], np.arange(count + 1))
    labels = np.empty(n, dtype=np.int64)
    local = np.empty(n, dtype=np.int64)
    offset = 0
    for g in range(count):
        nodes = order[node_bounds[g]:node_bounds[g + 1]]
        mine = edge_order[edge_bounds[g]:edge_bounds[g + 1]]
        local[nodes] = np.arange(len(nodes))
        part = engine.partition(len(nodes), local[edges[mine]], weights[mine], resolution=resolution, seed=seed,
                                n_iterations=n_iterations, initial=None if initial is None else dense_labels(initial[nodes]))
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
    cuts = np.flatnonzero(np.diff(membership[order])) + 1
    groups = np.split(order, cuts)
    firsts = np.array([g[0] for g in groups]) if groups else np.empty(0, dtype=np.int64)
    return [groups[i] for i in np.argsort(firsts, kind="stable")]


def hierarchical_leiden(n: int, edges: np.ndarray, weights: np.ndarray, config: ClusterConfig, engine,
                        initial: np.ndarray | None = None) -> list[Community]:
    """The hierarchy over nodes 0..n-1 with undirected weighted `edges` (shape [m, 2]).
    `initial` (optional, shape [levels, n]) gives each node a starting label per level; every
    split starts from those labels restricted to the nodes it splits.

    Level by level: all communities to split at a level are partitioned together (one engine
    run over their disjoint union, each by its own modularity), then the result is listed
    depth-first, each community followed by its descendants."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    weights = np.asarray(weights, dtype=np.float64)
    if not n:
        return []
    # igraph indexes sorted edges about twice as fast; every level below keeps this order
    order = np.argsort(edges[:, 0] * n + edges[:, 1], kind="stable")
    edges, weights = edges[order], weights[order]
    options = {"resolution": config.resolution, "n_iterations": config.n_iterations}

    def start(level: int, nodes: np.ndarray, groups: np.ndarray | None) -> np.ndarray | None:
        if initial is None or level >= len(initial):
            return None
        return dense_labels(initial[level][nodes], groups)

    membership = engine.partition(n, edges, weights, seed=config.seed, initial=start(0, np.arange(n), None), **options)
    # per level: (members, index of the parent in the previous level's list)
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
                                      initial=start(level, nodes, groups), **options)
        children = _relabel(membership)
        parent_of = groups[[c[0] for c in children]]
        count = np.bincount(parent_of, minlength=len(split))
        # a community Leiden cannot split stays a leaf
        levels.append([(nodes[c], split[p]) for c, p in zip(children, parent_of.tolist()) if count[p] >= 2])
        if not levels[-1]:
            levels.pop()
            break

    kids: list[dict[int, list[int]]] = [{} for _ in levels]
    for level in range(1, len(levels)):
        for i, (_, parent) in enumerate(levels[level]):
            kids[level - 1].setdefault(parent, []).append(i)
    result: list[Community] = []

    def emit(level: int, i: int, parent: int | None) -> None:
        result.append(Community(level, levels[level][i][0], parent, []))
        index = len(result) - 1
        if parent is not None:
            result[parent].children.append(index)
        for k in kids[level].get(i, []):
            emit(level + 1, k, index)

    for i in range(len(levels[0])):
        emit(0, i, None)
    return result


def dense_labels(labels: np.ndarray, within: np.ndarray | None = None) -> np.ndarray:
    """Relabel to 0..k-1 (leidenalg rejects a label >= the number of nodes). With `within`, the
    label is the pair (labels, within): equal labels in two graphs of a union stay apart."""
    labels = np.asarray(labels, dtype=np.int64)
    if within is not None:
        within = np.asarray(within, dtype=np.int64)
        labels = labels * (int(within.max()) + 1) + within if len(labels) else labels
    return np.unique(labels, return_inverse=True)[1].reshape(-1).astype(np.int64)


def previous_membership(entity_ids: list[str], previous: pa.Table) -> np.ndarray:
    """Labels per level [levels, n] from a previous communities table. An entity with no
    community at a level (new, or its community was a leaf above) starts alone there."""
    levels = previous.column("level").to_pylist()
    depth = max(levels) + 1 if levels else 0
    position = {e: i for i, e in enumerate(entity_ids)}
    n = len(entity_ids)
    # distinct 'alone' labels n.., above any community label
    labels = np.tile(np.arange(n, 2 * n, dtype=np.int64), (depth, 1))
    for index, (level, members) in enumerate(zip(levels, previous.column("entity_ids").to_pylist())):
        for e in members:
            if e in position:
                labels[level, position[e]] = index
    return labels


def graph_hash(entities: pa.Table, relationships: pa.Table) -> str:
    """Identifies the weighted graph: sorted entity ids and (relationship id, weight) pairs."""
    rels = sorted(zip(relationships.column("relationship_id").to_pylist(), relationships.column("weight").to_pylist()))
    return ids.stable_id("graph", *sorted(entities.column("entity_id").to_pylist()), *(f"{r}:{w!r}" for r, w in rels), length=32)


def cluster(entities: pa.Table, relationships: pa.Table, config: ClusterConfig, engine=None,
            previous: pa.Table | None = None) -> pa.Table:
    """The communities table for the current entities and relationships (warm-started from
    `previous` communities when given and `config.warm_start` is set)."""
    engine = engine or make_engine(config.engine)
    entity_ids = sorted(entities.column("entity_id").to_pylist())
    rel_ids = relationships.column("relationship_id").to_pylist()
    src, tgt = (_positions(relationships.column(name), entity_ids) for name in ("source_id", "target_id"))
    edges = np.column_stack([src, tgt])
    weights = np.asarray(relationships.column("weight").to_pylist(), dtype=np.float64)

    initial = None
    if config.warm_start and previous is not None and previous.num_rows:
        initial = previous_membership(entity_ids, previous)
    communities = hierarchical_leiden(len(entity_ids), edges, weights, config, engine, initial)

    # relationship and chunk ids as codes in sorted order, so that each community's sorted
    # distinct ids come from one numpy pass per level rather than Python sets per community
    rel_names, rel_codes = np.unique(np.asarray(rel_ids, dtype=object), return_inverse=True) if rel_ids else (np.empty(0), np.empty(0, np.int64))
    chunk_lists = dict(zip(entities.column("entity_id").to_pylist(), entities.column("chunk_ids").to_pylist()))
    chunk_owner = np.repeat(np.arange(len(entity_ids)), [len(chunk_lists[e] or []) for e in entity_ids])
    all_chunks = [c for e in entity_ids for c in chunk_lists[e] or []]
    chunk_names, chunk_codes = np.unique(np.asarray(all_chunks, dtype=object), return_inverse=True) if all_chunks else (np.empty(0), np.empty(0, np.int64))
    src_a, tgt_a = np.asarray(src, dtype=np.int64), np.asarray(tgt, dtype=np.int64)

    inside: list[list[str]] = [[] for _ in communities]
    chunks: list[list[str]] = [[] for _ in communities]
    for level in sorted({c.level for c in communities}):
        at_level = [i for i, c in enumerate(communities) if c.level == level]
        label = np.full(len(entity_ids), -1, dtype=np.int64)
        for k, i in enumerate(at_level):
            label[communities[i].members] = k
        a, b = label[src_a], label[tgt_a]
        for k, codes in enumerate(_codes_by_label(np.where(a == b, a, -1), rel_codes.reshape(-1), len(at_level))):
            inside[at_level[k]] = rel_names[codes].tolist()
        for k, codes in enumerate(_codes_by_label(label[chunk_owner], chunk_codes.reshape(-1), len(at_level))):
            chunks[at_level[k]] = chunk_names[codes].tolist()

    hashed = graph_hash(entities, relationships)
    members = [[entity_ids[i] for i in c.members] for c in communities]  # sorted: members and entity_ids are
    cids = [ids.community_id(c.level, m) for c, m in zip(communities, members)]
    rows = [
        {
            "community_id": cids[index],
            "human_id": index,
            "level": c.level,
            "parent_id": None if c.parent is None else cids[c.parent],
            "children_ids": [cids[k] for k in c.children],
            "entity_ids": members[index],
            "relationship_ids": inside[index],
            "chunk_ids": chunks[index],
            "size": len(members[index]),
            "graph_hash": hashed,
        }
        for index, c in enumerate(communities)
    ]
    return pa.Table.from_pylist(rows, schema=tables.schema("communities").arrow)


def _positions(names: pa.ChunkedArray, entity_ids: list[str]) -> np.ndarray:
    """Index of each name in the sorted entity ids (a relationship to an unknown entity is an error)."""
    import pyarrow.compute as pc

    found = pc.index_in(names, value_set=pa.array(entity_ids, type=names.type))
    if found.null_count:
        raise KeyError(f"{names.filter(pc.is_null(found))[0]} is not in the entities table")
    return found.to_numpy(zero_copy_only=False).astype(np.int64)


def _codes_by_label(labels: np.ndarray, codes: np.ndarray, count: int) -> list[np.ndarray]:
    """For each label 0..count-1, the sorted distinct codes that come with it (label -1: none)."""
    keep = labels >= 0
    width = int(codes.max()) + 1 if len(codes) else 1
    pairs = np.unique(labels[keep] * width + codes[keep])
    bounds = np.searchsorted(pairs // width, np.arange(count + 1))
    return [pairs[bounds[k]:bounds[k + 1]] % width for k in range(count)]


def modularity(n: int, edges: np.ndarray, weights: np.ndarray, membership: np.ndarray) -> float:
    """Weighted modularity of a flat partition (for comparing engines, not labels)."""
    graph = _igraph(n, edges)
    return graph.modularity(membership.tolist(), weights=np.asarray(weights).tolist())
