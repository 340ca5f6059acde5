"""Cluster: hierarchical Leiden over the entity graph (a fan-in stage).

The hierarchy contract, the same for every engine: level 0 partitions all entities (isolated
entities and small components are communities of their own); a community larger than
`max_cluster_size` is split by Leiden on its induced subgraph into children at the next level,
recursively, until every leaf fits or Leiden cannot split it further. An engine only has to
partition one graph; the recursion lives here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from graphwright import ids, tables
from graphwright.config import ClusterConfig


class IgraphEngine:
    """igraph's C implementation of Leiden, optimizing modularity."""

    name = "igraph"

    def partition(self, n: int, edges: np.ndarray, weights: np.ndarray, *, resolution: float, seed: int,
                  n_iterations: int, initial: np.ndarray | None = None) -> np.ndarray:
        import igraph as ig

        graph = ig.Graph(n=n, edges=edges.tolist(), directed=False)
        # igraph draws from Python's `random`; seeding it makes the partition reproducible
        random.seed(seed)
        part = graph.community_leiden(
            objective_function="modularity", weights=weights.tolist(), resolution=resolution, n_iterations=n_iterations,
            initial_membership=None if initial is None else initial.tolist(),
        )
        return np.asarray(part.membership, dtype=np.int64)


class LeidenalgEngine:
    """leidenalg's reference implementation (slower; has its own seed argument)."""

    name = "leidenalg"

    def partition(self, n, edges, weights, *, resolution, seed, n_iterations, initial=None):
        import igraph as ig
        import leidenalg

        graph = ig.Graph(n=n, edges=edges.tolist(), directed=False)
        part = leidenalg.find_partition(
            graph, leidenalg.RBConfigurationVertexPartition, weights=weights.tolist(),
            resolution_parameter=resolution, seed=seed, n_iterations=n_iterations,
            initial_membership=None if initial is None else initial.tolist(),
        )
        return np.asarray(part.membership, dtype=np.int64)


def make_engine(name: str):
    if name == "igraph":
        return IgraphEngine()
    if name == "leidenalg":
        return LeidenalgEngine()
    raise ValueError(f"unknown graph engine {name!r}")


@dataclass
class Community:
    level: int
    members: np.ndarray  # node indices, sorted
    parent: int | None  # index into the result list
    children: list[int]


def _relabel(membership: np.ndarray) -> list[np.ndarray]:
    """Groups of node positions by label, ordered by their smallest member (engine-independent)."""
    order = np.argsort(membership, kind="stable")
    labels = membership[order]
    cuts = np.flatnonzero(np.diff(labels)) + 1
    groups = [np.sort(g) for g in np.split(order, cuts)]
    return sorted(groups, key=lambda g: int(g[0]))


def hierarchical_leiden(n: int, edges: np.ndarray, weights: np.ndarray, config: ClusterConfig, engine,
                        initial: np.ndarray | None = None) -> list[Community]:
    """The hierarchy over nodes 0..n-1 with undirected weighted `edges` (shape [m, 2]).
    `initial` (optional, shape [levels, n]) gives each node a starting label per level; every
    split starts from those labels restricted to the nodes it splits."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    weights = np.asarray(weights, dtype=np.float64)
    result: list[Community] = []

    def split(nodes: np.ndarray, level: int, parent: int | None) -> None:
        if len(nodes) == n:
            sub_edges, sub_weights = edges, weights
        else:
            local = np.full(n, -1, dtype=np.int64)
            local[nodes] = np.arange(len(nodes))
            keep = (local[edges[:, 0]] >= 0) & (local[edges[:, 1]] >= 0)
            sub_edges, sub_weights = local[edges[keep]], weights[keep]
        membership = engine.partition(
            len(nodes), sub_edges, sub_weights,
            resolution=config.resolution, seed=config.seed + level, n_iterations=config.n_iterations,
            initial=None if initial is None or level >= len(initial) else dense_labels(initial[level][nodes]),
        )
        groups = _relabel(membership)
        if parent is not None and len(groups) < 2:
            return  # Leiden cannot split it: it stays a leaf
        for group in groups:
            members = nodes[group]
            result.append(Community(level, members, parent, []))
            index = len(result) - 1
            if parent is not None:
                result[parent].children.append(index)
            if len(members) > config.max_cluster_size and level + 1 < config.max_levels:
                split(members, level + 1, index)

    if n:
        split(np.arange(n), 0, None)
    return result


def dense_labels(labels: np.ndarray) -> np.ndarray:
    """Relabel to 0..k-1 (leidenalg rejects a label >= the number of nodes)."""
    return np.unique(labels, return_inverse=True)[1].astype(np.int64)


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
    position = {eid: i for i, eid in enumerate(entity_ids)}
    rel_ids = relationships.column("relationship_id").to_pylist()
    src = [position[s] for s in relationships.column("source_id").to_pylist()]
    tgt = [position[t] for t in relationships.column("target_id").to_pylist()]
    edges = np.column_stack([src, tgt]) if src else np.empty((0, 2), dtype=np.int64)
    weights = np.asarray(relationships.column("weight").to_pylist(), dtype=np.float64)

    initial = None
    if config.warm_start and previous is not None and previous.num_rows:
        initial = previous_membership(entity_ids, previous)
    communities = hierarchical_leiden(len(entity_ids), edges, weights, config, engine, initial)

    entity_chunks = dict(zip(entities.column("entity_id").to_pylist(), entities.column("chunk_ids").to_pylist()))
    node_rels: dict[int, list[int]] = {}
    for r, (a, b) in enumerate(zip(src, tgt)):
        node_rels.setdefault(a, []).append(r)
        node_rels.setdefault(b, []).append(r)

    cids = [ids.community_id(c.level, (entity_ids[i] for i in c.members)) for c in communities]
    rows = []
    for index, c in enumerate(communities):
        members = set(int(i) for i in c.members)
        inside = sorted({rel_ids[r] for i in members for r in node_rels.get(i, []) if src[r] in members and tgt[r] in members})
        member_ids = sorted(entity_ids[i] for i in members)
        rows.append(
            {
                "community_id": cids[index],
                "human_id": index,
                "level": c.level,
                "parent_id": None if c.parent is None else cids[c.parent],
                "children_ids": [cids[k] for k in c.children],
                "entity_ids": member_ids,
                "relationship_ids": inside,
                "chunk_ids": sorted({cid for e in member_ids for cid in entity_chunks[e]}),
                "size": len(members),
                "graph_hash": graph_hash(entities, relationships),
            }
        )
    return pa.Table.from_pylist(rows, schema=tables.schema("communities").arrow)


def modularity(n: int, edges: np.ndarray, weights: np.ndarray, membership: np.ndarray) -> float:
    """Weighted modularity of a flat partition (for comparing engines, not labels)."""
    import igraph as ig

    graph = ig.Graph(n=n, edges=np.asarray(edges).tolist(), directed=False)
    return graph.modularity(membership.tolist(), weights=np.asarray(weights).tolist())
