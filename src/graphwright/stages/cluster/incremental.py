"""Cluster an update where the graph changed, and only there (plain functions).

The previous run's graph is kept (state/cluster): diffed with the current one, it gives the edges
that changed (added, removed, or reweighted) and the entities they touch. Then, level by level,
Leiden runs over units: the members of a previous community that the change did not touch move
together as one unit, every touched or new entity on its own, started from the previous
communities:
- level 0: all units, by the whole graph's modularity (CPM with node weights k_i / sqrt(2m),
  engines.graph.igraph_engine); a top-level community none of whose members is touched keeps its
  members and, unchanged inside, its whole subtree;
- below: a community whose members and internal edges are what they were keeps its whole
  subtree; the others are split over the units of the previous level's communities.
So only touched entities change community, at any level (whole units merge only where that
raises modularity): a community without a touched member keeps its members, id and report. Rows
are rebuilt only for communities whose id, parent, children, internal relationships or members'
chunks changed; the rest are kept unread.
The graph hash is a sum of per-item hashes, updated from the changed edges and entities."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.config import ClusterConfig
from graphwright.engines.graph.graphs import dense_labels, modularity
from graphwright.stages.cluster.hierarchy import _relabel, partition_groups, sorted_edges
from graphwright.stages.resolve.pair_cache import mix, set_hashes
from graphwright.util.numeric import grouped_order, pair_inverse, sorted_index, to_numpy, unique_inverse


def graph_sum(node_hash: np.ndarray, edges: np.ndarray, weights: np.ndarray) -> int:
    """An order-free hash of a weighted graph (entities by their id hashes, edges by their ends and
    weight): a sum, so that an update adds the hashes of what it added and subtracts the rest."""
    ends = node_hash[edges] if len(edges) else np.empty((0, 2), np.int64)
    items = np.concatenate([mix(node_hash), mix(np.minimum(ends[:, 0], ends[:, 1]), np.maximum(ends[:, 0], ends[:, 1]),
                                                   np.asarray(weights, np.float64).view(np.int64))])
    with np.errstate(over="ignore"):
        return int(np.sum(items.astype(np.uint64), dtype=np.uint64))


def graph_digest(total: int) -> str:
    return f"{total & ((1 << 64) - 1):016x}"


def graph_changes(old_ids: pa.Array, old_edges: np.ndarray, old_weights: np.ndarray, entity_ids: list[str],
                  edges: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(touched node mask, the current edges that are new or reweighted, the previous edges that are
    gone or reweighted, as positions into their arrays, the new nodes mask) between two graphs."""
    n = len(entity_ids)
    where = to_numpy(pc.fill_null(pc.index_in(old_ids, value_set=pa.array(entity_ids, pa.string())), -1), np.int64)
    moved = where[old_edges] if len(old_edges) else np.empty((0, 2), np.int64)
    lost = (moved < 0).any(axis=1) if len(moved) else np.zeros(0, bool)
    width = max(n, 1)
    old_code = np.where(lost, -1, np.minimum(moved[:, 0], moved[:, 1]) * width + np.maximum(moved[:, 0], moved[:, 1])) if len(moved) else np.empty(0, np.int64)
    new_code = np.minimum(edges[:, 0], edges[:, 1]) * width + np.maximum(edges[:, 0], edges[:, 1]) if len(edges) else np.empty(0, np.int64)
    # orders by sorting values (grouped_order; a lost edge's -1 shifted to 0): 2.26M edges each,
    # 0.16 s where np.argsort took 0.29 s
    order_old, order_new = grouped_order(old_code + 1), grouped_order(new_code)
    at = sorted_index(old_code[order_old], new_code)  # a lost edge's -1 matches no edge
    match = at >= 0
    same = match.copy()
    same[match] = old_weights[order_old][at[match]] == weights[match]
    changed_new = np.flatnonzero(~same)
    at = sorted_index(new_code[order_new], old_code)
    match = (at >= 0) & ~lost
    same_old = match.copy()
    same_old[match] = weights[order_new][at[match]] == old_weights[match]
    changed_old = np.flatnonzero(~same_old)
    touched = np.zeros(n, dtype=bool)
    touched[edges[changed_new].reshape(-1)] = True
    ends = moved[changed_old].reshape(-1)
    touched[ends[ends >= 0]] = True
    new_nodes = np.ones(n, dtype=bool)
    new_nodes[where[where >= 0]] = False
    touched |= new_nodes
    return touched, changed_new, changed_old, new_nodes


def previous_levels(previous: pa.Table, entity_ids: list[str]) -> list[list[tuple[np.ndarray, int | None, str]]]:
    """The previous hierarchy in current node positions: per level, (members, parent index, id);
    entities that left are dropped from their communities."""
    position = pa.array(entity_ids, pa.string())
    levels: list[list] = []
    index_of: dict[str, tuple[int, int]] = {}
    rows = previous.sort_by([("level", "ascending"), ("community_id", "ascending")])
    members = rows.column("entity_ids").combine_chunks()
    flat = to_numpy(pc.fill_null(pc.index_in(pc.list_flatten(members), value_set=position), -1), np.int64)
    offsets = to_numpy(members.offsets, np.int64)
    # every community's members sorted at once: (row, position) in one key (one sort per
    # community was 0.3-0.4 s of an update at 145k chunks)
    width = len(entity_ids) + 1
    row = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    ordered = np.sort(row[flat >= 0] * width + flat[flat >= 0])
    bounds = np.searchsorted(ordered // width, np.arange(len(offsets))).tolist()
    ordered %= width
    for r, (cid, level, parent) in enumerate(zip(*(rows.column(c).to_pylist() for c in ("community_id", "level", "parent_id")))):
        while len(levels) <= level:
            levels.append([])
        index_of[cid] = (level, len(levels[level]))
        levels[level].append((ordered[bounds[r]:bounds[r + 1]].copy(), parent, cid))
    return [[(m, None if p is None else index_of[p][1], cid) for m, p, cid in level] for level in levels]


def member_hashes(groups: list[np.ndarray], node_hash: np.ndarray) -> np.ndarray:
    owner = np.repeat(np.arange(len(groups)), [len(g) for g in groups]) if groups else np.empty(0, np.int64)
    items = np.concatenate(groups) if groups else np.empty(0, np.int64)
    return set_hashes(owner, node_hash[items], len(groups)) ^ np.array([len(g) for g in groups], dtype=np.int64)


def incremental_levels(n: int, edges: np.ndarray, weights: np.ndarray, config: ClusterConfig, engine, prev: list,
                       touched: np.ndarray, node_hash: np.ndarray, pool=None, usage: dict | None = None,
                       refresh: bool = True, given_top: np.ndarray | None = None,
                       ) -> tuple[list[list[tuple[np.ndarray, int | None]]], dict]:
    """The hierarchy's levels (as hierarchy._levels gives them) re-partitioned only where the graph
    changed (module docstring): `touched` marks the ends of every changed edge and new nodes.
    The units' top level is checked against fresh_top's, computed here; `refresh=False`: it is
    kept unchecked (checked_levels checks it after, against one computed elsewhere meanwhile);
    `given_top`: the top level's labels, taken as they are."""
    options = {"resolution": config.resolution, "n_iterations": config.n_iterations}
    strength = np.bincount(edges[:, 0], weights, n) + np.bincount(edges[:, 1], weights, n) if len(edges) else np.zeros(n)
    stats = {"top_communities_kept": 0, "top_communities_repartitioned": 0, "subtrees_reused": 0, "splits": 0,
             "units_partitioned": 0, "top_units": 0}
    prev0 = prev[0] if prev else []
    old = _labels(prev0, n)
    if given_top is not None:
        top = _relabel(given_top)
    elif (touched | (old < 0)).any():
        units = Units.of(old, touched, np.zeros(n, np.int64))
        r_edges, r_weights = units.graph(edges, weights)
        labels = engine.partition(units.count, r_edges, r_weights, seed=config.seed, initial=units.initial,
                                  strength=np.bincount(units.unit, strength, units.count), total=float(strength.sum()), **options)
        labels = labels[units.unit]
        if refresh:
            labels = _refreshed(n, edges, weights, labels, config, engine, stats, lambda: fresh_top(n, edges, weights, config, engine))
        top = _relabel(labels)
        stats["units_partitioned"] += units.count
        stats["top_units"] = units.count
    else:
        top = [m for m, _, _ in prev0 if len(m)]
    levels: list[list[tuple[np.ndarray, int | None]]] = [[(m, None) for m in top]]
    # a community is "as it was" if a previous community at its level has its members and none of
    # them is touched (every changed edge touched both its ends): its previous children are its children
    prev_by_hash = [dict(zip(member_hashes([m for m, _, _ in level], node_hash).tolist(), range(len(level)))) for level in prev]
    as_was = _as_was(levels[0], 0, prev_by_hash, node_hash, touched)
    kept0 = sum(j is not None for j in as_was)
    stats["top_communities_kept"], stats["top_communities_repartitioned"] = kept0, len(top) - kept0
    while len(levels) < config.max_levels:
        level = len(levels)
        parents = levels[-1]
        split = [i for i, (members, _) in enumerate(parents) if len(members) > config.max_cluster_size]
        if not split:
            break
        children: list[tuple[np.ndarray, int]] = []
        redo = []
        kids_of: dict[int, list[np.ndarray]] = {}
        for m, p, _ in prev[level] if level < len(prev) else ():
            if len(m):  # a previous child whose members are all gone is no child now
                kids_of.setdefault(p, []).append(m)
        for i in split:
            j = as_was[i]
            if j is not None:
                mine = kids_of.get(j, [])
                if len(mine) >= 2:  # the same community, unchanged inside: its previous split stands
                    children.extend((m, i) for m in mine)
                    stats["subtrees_reused"] += 1
                    continue
                if not mine:  # a leaf Leiden could not split before stays one
                    continue
            redo.append(i)
        if redo:
            stats["splits"] += len(redo)
            children.extend(_split(n, edges, weights, parents, redo, config, engine, prev, level, touched, pool, usage,
                                   options, stats))
        children.sort(key=lambda c: (c[1], int(c[0][0])))
        if not children:
            break
        levels.append(children)
        as_was = _as_was(children, level, prev_by_hash, node_hash, touched)
    return levels, stats


def fresh_top(n: int, edges: np.ndarray, weights: np.ndarray, config: ClusterConfig, engine) -> np.ndarray:
    """The top level of a fresh clustering, as the refresh check makes it: Leiden over every entity,
    not warm-started, as a first build runs it but for its first `refresh_iterations` iterations
    (_polished gives a top level it replaces the rest)."""
    return engine.partition(n, *sorted_edges(n, edges, weights), seed=config.seed,
                            resolution=config.resolution, n_iterations=_check_iterations(config))


def _check_iterations(config: ClusterConfig) -> int:
    """The iterations the refresh check's fresh clustering runs (at most a build's)."""
    return min(config.refresh_iterations, config.n_iterations)


def _polished(n: int, edges: np.ndarray, weights: np.ndarray, labels: np.ndarray, config: ClusterConfig, engine) -> np.ndarray:
    """fresh_top's `labels` after the iterations of a first build it did not run, warm-started
    from them: the top level an update takes from the check is as converged as a build's. Run
    on the driver, after the check, only on an update that refreshes (at 1.2M chunks three warm
    iterations are about 2.5 s more of that update)."""
    rest = config.n_iterations - _check_iterations(config)
    if not rest:
        return labels
    return engine.partition(n, *sorted_edges(n, edges, weights), seed=config.seed, resolution=config.resolution,
                            n_iterations=rest, initial=labels)


def checked_levels(n: int, edges: np.ndarray, weights: np.ndarray, config: ClusterConfig, engine, prev: list,
                   touched: np.ndarray, node_hash: np.ndarray, pool, usage: dict | None, fresh,
                   meanwhile: Callable[[list], object] | None = None) -> tuple[list, dict, object]:
    """incremental_levels, its refresh check made once the units' levels are all done: `fresh()`
    (fresh_top, computed elsewhere meanwhile) is waited for last. Should the fresh top level win,
    the levels below it are made again from it. `meanwhile(levels)`: work on the units' levels
    done before the wait (on a core the wait would leave idle), and done again on the levels
    that replace them; its result is the third item (None without it)."""
    levels, stats = incremental_levels(n, edges, weights, config, engine, prev, touched, node_hash, pool, usage, refresh=False)
    made = meanwhile(levels) if meanwhile is not None else None
    better = _checked_top(n, edges, weights, levels, config, engine, stats, fresh)
    if better is None:
        return levels, stats, made
    checked = {k: stats[k] for k in ("modularity_units", "modularity_fresh", "modularity_refreshed", "refreshed", "top_units")}
    levels, stats = incremental_levels(n, edges, weights, config, engine, prev, touched, node_hash, pool, usage, given_top=better)
    stats.update(checked, units_partitioned=stats["units_partitioned"] + checked["top_units"])
    return levels, stats, meanwhile(levels) if meanwhile is not None else None


def _checked_top(n: int, edges, weights, levels: list, config: ClusterConfig, engine, stats: dict, fresh) -> np.ndarray | None:
    """The fresh top level's labels if they are to replace the units' top level of `levels`
    (incremental_levels(refresh=False)), else None."""
    if not stats.get("top_units"):
        return None  # the top level was not re-partitioned: nothing to check
    labels = np.full(n, -1, np.int64)
    for i, (members, _) in enumerate(levels[0]):
        labels[members] = i
    better = _refreshed(n, edges, weights, labels, config, engine, stats, fresh)
    return better if stats.get("refreshed") else None


def _refreshed(n: int, edges, weights, labels: np.ndarray, config: ClusterConfig, engine, stats: dict, fresh) -> np.ndarray:
    """The top level an update keeps: `labels` (only touched entities moved), unless the top level
    of a fresh clustering (`fresh()`, fresh_top) has a top-level modularity (at the configured
    resolution) higher by more than `config.refresh_gain`; then that one, given the build's remaining iterations (_polished).
    Units never re-optimize what a change did not touch, and Leiden warm-started from them stays
    near them: over 30 generated 1% updates of the 145k-chunk graph, both fell 0.003-0.006 below
    a fresh clustering (bench/cluster_drift.py)."""
    if config.refresh_gain is None or not n:
        return labels
    better_labels = fresh()

    def quality(partition: np.ndarray) -> float:  # what Leiden optimizes at the configured resolution
        return modularity(n, edges, weights, partition, config.resolution)

    kept, better = quality(labels), quality(better_labels)
    stats.update(modularity_units=round(kept, 6), modularity_fresh=round(better, 6), refreshed=bool(better - kept > config.refresh_gain))
    if not stats["refreshed"]:
        return labels
    polished = _polished(n, edges, weights, better_labels, config, engine)
    after = quality(polished)
    if after < better:  # the rest of the iterations lost ground: the check's own labels stand
        polished, after = better_labels, better
    stats["modularity_refreshed"] = round(after, 6)
    return polished


def as_previous(communities: list) -> list:
    """hierarchical_leiden's communities in previous_levels' shape (what incremental_levels takes
    from a communities table): per level, (members, the parent's index in its level, an id)."""
    levels, where = [], {}
    for index, c in enumerate(communities):
        while len(levels) <= c.level:
            levels.append([])
        where[index] = len(levels[c.level])
        levels[c.level].append((c.members, c.parent, f"c{index}"))
    return [[(m, None if p is None else where[p], cid) for m, p, cid in level] for level in levels]


def top_labels(communities: list, n: int) -> np.ndarray:
    """Per node, the index of its top-level community among hierarchical_leiden's (-1: none)."""
    label = np.full(n, -1, dtype=np.int64)
    for k, c in enumerate(c for c in communities if c.level == 0):
        label[c.members] = k
    return label


def _labels(level: list, n: int) -> np.ndarray:
    """Per node, the index of its community in a previous level's list (-1: in none)."""
    label = np.full(n, -1, dtype=np.int64)
    for k, (members, _, _) in enumerate(level):
        label[members] = k
    return label


@dataclass
class Units:
    """What an update partitions: the members of a previous community that the change did not
    touch move as one unit (they were placed together, and nothing about them changed); every
    touched or new node is a unit of its own. Leiden over the units, started from the previous
    communities, so moves only what the change touched: partitioning every node of a touched
    community again moved thousands of untouched entities per update (at 145k chunks, 12 changed
    documents gave 1,539 communities new members, and each a new report)."""

    unit: np.ndarray  # per node, its unit
    count: int
    initial: np.ndarray  # per unit, its starting label (dense within its group)
    group: np.ndarray  # per unit, the graph of the union it belongs to

    @classmethod
    def of(cls, old: np.ndarray, touched: np.ndarray, group: np.ndarray) -> Units:
        """`old`: each node's previous community (-1: none), `group`: its graph in a union."""
        free = touched | (old < 0)
        width = int(old.max()) + 2 if len(old) else 1
        key = np.where(free, -1 - np.arange(len(old)), group * width + old)
        _, unit = unique_inverse(key)
        count = int(unit.max()) + 1 if len(unit) else 0
        member = np.empty(count, dtype=np.int64)
        member[unit] = np.arange(len(unit))
        start = np.where(old >= 0, old, width + np.arange(len(old)))  # a new node starts alone
        return cls(unit, count, dense_labels(start[member], group[member]), group[member])

    def graph(self, edges: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The edges between units, summed (sorted; a unit's inner edges as a self-loop, so that
        its strength is its members' and the graph's total weight is unchanged)."""
        if not len(edges):
            return np.empty((0, 2), np.int64), np.empty(0, np.float64)
        a, b = self.unit[edges[:, 0]], self.unit[edges[:, 1]]
        code, at = pair_inverse(np.minimum(a, b), np.maximum(a, b), self.count, self.count)
        return np.column_stack([code // self.count, code % self.count]), np.bincount(at, weights, len(code))


def _as_was(communities, level: int, prev_by_hash: list[dict], node_hash, touched) -> list[int | None]:
    """Per community, the index of the previous community at `level` it is identical to (same
    members, none of them touched by a changed edge), else None."""
    if level >= len(prev_by_hash):
        return [None] * len(communities)
    hashes = member_hashes([m for m, _ in communities], node_hash).tolist()
    return [None if touched[m].any() else prev_by_hash[level].get(h) for (m, _), h in zip(communities, hashes)]


def _split(n, edges, weights, parents, redo, config: ClusterConfig, engine, prev, level, touched, pool, usage, options,
           stats):
    """Children of the communities `redo` (indices into `parents`), as hierarchy._levels splits a
    level, over Units of the previous level's communities: only touched nodes move."""
    group_of = np.full(n, -1, dtype=np.int64)
    for g, i in enumerate(redo):
        group_of[parents[i][0]] = g
    nodes = np.flatnonzero(group_of >= 0)
    groups = group_of[nodes]
    ends = group_of[edges] if len(edges) else np.empty((0, 2), np.int64)
    keep = (ends[:, 0] >= 0) & (ends[:, 0] == ends[:, 1]) if len(edges) else np.zeros(0, bool)
    local = np.full(n, -1, dtype=np.int64)
    local[nodes] = np.arange(len(nodes))
    old = _labels(prev[level], n)[nodes] if level < len(prev) else np.full(len(nodes), -1, dtype=np.int64)
    units = Units.of(old, touched[nodes], groups)
    r_edges, r_weights = units.graph(local[edges[keep]], weights[keep])
    stats["units_partitioned"] += units.count
    labels = partition_groups(engine, units.count, r_edges, r_weights, units.group, seed=config.seed + level,
                              initial=units.initial, pool=pool, usage=usage, **options)
    kids = _relabel(labels[units.unit])
    parent_of = groups[[c[0] for c in kids]]
    count = np.bincount(parent_of, minlength=len(redo))
    return [(nodes[c], redo[p]) for c, p in zip(kids, parent_of.tolist()) if count[p] >= 2]
