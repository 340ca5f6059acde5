import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from graphwright import ids
from graphwright.config import ClusterConfig
from graphwright.engines.graph import make_engine
from graphwright.engines.graph.graphs import modularity
from graphwright.engines.graph.igraph_engine import IgraphEngine, group_node_weights
from graphwright.engines.graph.leidenalg_engine import LeidenalgEngine
from graphwright.stages.cluster.communities import ChunkLists, cluster, cluster_parts
from graphwright.stages.cluster.hierarchy import (
    _relabel,
    hierarchical_leiden,
    partition_groups,
)
from graphwright.storage import contracts


def planted_partition(sizes, p_in, p_out, seed):
    """Undirected random graph with dense blocks of the given sizes (stochastic block model)."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(sizes)), sizes)
    i, j = np.triu_indices(len(labels), 1)
    p = np.where(labels[i] == labels[j], p_in, p_out)
    keep = rng.random(len(p)) < p
    edges = np.column_stack([i[keep], j[keep]])
    weights = rng.uniform(0.5, 2.0, len(edges))
    return len(labels), edges, weights, labels


def hierarchical_graph(seed=11):
    """4 groups of 2 sub-groups of 8 nodes: dense inside sub-groups, medium inside groups, sparse outside."""
    rng = np.random.default_rng(seed)
    sub = np.repeat(np.arange(8), 8)
    group = sub // 2
    i, j = np.triu_indices(len(sub), 1)
    p = np.where(sub[i] == sub[j], 0.8, np.where(group[i] == group[j], 0.15, 0.01))
    keep = rng.random(len(p)) < p
    return len(sub), np.column_stack([i[keep], j[keep]]), np.ones(int(keep.sum()))


def check_hierarchy(n, communities, max_size, edges=None, engine=None, config=None):
    level0 = [c for c in communities if c.level == 0]
    members = np.concatenate([c.members for c in level0])
    assert sorted(members.tolist()) == list(range(n))  # every node in exactly one level-0 community
    ancestors: list[int] = []  # listed depth-first: each community right after its parent or a sibling's subtree
    for index, c in enumerate(communities):
        while ancestors and ancestors[-1] != c.parent:
            ancestors.pop()
        assert ancestors[-1:] == ([] if c.parent is None else [c.parent])
        ancestors.append(index)
        assert c.children == sorted(c.children)
        assert list(c.members) == sorted(c.members)
        assert (c.parent is None) == (c.level == 0)
        if c.children:
            kids = [communities[k] for k in c.children]
            assert all(k.level == c.level + 1 and k.parent == index for k in kids)
            union = np.concatenate([k.members for k in kids])
            assert sorted(union.tolist()) == c.members.tolist()  # children partition their parent
            assert len(kids) >= 2
            assert len(c.members) > max_size  # only oversized communities are split
        elif len(c.members) > max_size and c.level + 1 < config.max_levels:
            # an oversized leaf is allowed only when Leiden cannot split it
            local = {int(v): k for k, v in enumerate(c.members)}
            sub = [(local[a], local[b]) for a, b in edges.tolist() if a in local and b in local]
            part = engine.partition(len(c.members), np.array(sub, dtype=np.int64).reshape(-1, 2), np.ones(len(sub)),
                                    resolution=config.resolution, seed=config.seed + c.level + 1,
                                    n_iterations=config.n_iterations)
            assert len(set(part.tolist())) == 1, f"leaf of {len(c.members)} > {max_size} could be split"


@pytest.mark.parametrize("engine", [IgraphEngine(), LeidenalgEngine()], ids=lambda e: e.name)
def test_hierarchy_contract(engine):
    n, edges, weights = hierarchical_graph()
    cfg = ClusterConfig(max_cluster_size=10)
    communities = hierarchical_leiden(n, edges, weights, cfg, engine)
    check_hierarchy(n, communities, 10, edges, engine, cfg)
    leaves = [c for c in communities if not c.children]
    assert all(len(c.members) <= 10 for c in leaves)  # this graph is splittable down to 8-node groups
    assert max(c.level for c in communities) >= 1


def test_unsplittable_leaf_stays_oversized():
    # a clique has no community structure: Leiden returns it whole and it stays a leaf
    i, j = np.triu_indices(30, 1)
    edges = np.column_stack([i, j])
    cfg = ClusterConfig(max_cluster_size=10)
    communities = hierarchical_leiden(30, edges, np.ones(len(edges)), cfg, IgraphEngine())
    assert [(c.level, len(c.members), c.children) for c in communities] == [(0, 30, [])]
    check_hierarchy(30, communities, 10, edges, IgraphEngine(), cfg)


def test_max_levels_bounds_depth():
    n, edges, weights = hierarchical_graph()
    cfg = ClusterConfig(max_cluster_size=2, max_levels=2)
    communities = hierarchical_leiden(n, edges, weights, cfg, IgraphEngine())
    assert max(c.level for c in communities) <= 1


def test_isolated_nodes_and_empty_graph():
    cfg = ClusterConfig()
    communities = hierarchical_leiden(4, np.empty((0, 2)), np.empty(0), cfg, IgraphEngine())
    assert [c.members.tolist() for c in communities] == [[0], [1], [2], [3]]
    assert hierarchical_leiden(0, np.empty((0, 2)), np.empty(0), cfg, IgraphEngine()) == []


@pytest.mark.parametrize("engine", ["igraph", "leidenalg"])
def test_deterministic_with_seed(engine):
    n, edges, weights, _ = planted_partition([12, 10, 14, 9], 0.4, 0.05, seed=5)
    cfg = ClusterConfig(max_cluster_size=5, seed=7)
    runs = [hierarchical_leiden(n, edges, weights, cfg, make_engine(engine)) for _ in range(3)]
    shapes = [[(c.level, c.members.tolist(), c.parent, c.children) for c in r] for r in runs]
    assert shapes[0] == shapes[1] == shapes[2]


def test_engines_agree_on_planted_partition():
    n, edges, weights, labels = planted_partition([15, 15, 15, 15], 0.5, 0.02, seed=7)
    scores = {}
    for engine in (IgraphEngine(), LeidenalgEngine()):
        membership = engine.partition(n, edges, weights, resolution=1.0, seed=42, n_iterations=5)
        assert membership.shape == (n,)
        groups = _relabel(membership)
        assert sorted(np.concatenate(groups).tolist()) == list(range(n))  # a valid partition
        scores[engine.name] = modularity(n, edges, weights, membership)
    planted = modularity(n, edges, weights, labels)
    assert abs(scores["igraph"] - scores["leidenalg"]) <= 0.05
    for score in scores.values():
        assert score >= planted - 0.05  # both recover (about) the planted structure


def test_relabel_orders_groups_by_smallest_member():
    groups = _relabel(np.array([5, 5, 2, 9, 2, 5]))
    assert [g.tolist() for g in groups] == [[0, 1, 5], [2, 4], [3]]


def test_bins_hold_each_graph_whole_in_local_ids(monkeypatch):
    import graphwright.stages.cluster.hierarchy as cluster_module

    rng = np.random.default_rng(3)
    groups = np.sort(rng.integers(0, 40, 600))
    rng.shuffle(groups)  # graphs interleaved over the node ids, as a level's splits are
    pairs = rng.integers(0, 600, (6000, 2))
    pairs = np.unique(np.sort(pairs[(groups[pairs[:, 0]] == groups[pairs[:, 1]]) & (pairs[:, 0] != pairs[:, 1])], axis=1), axis=0)
    weights = rng.random(len(pairs))
    monkeypatch.setattr(cluster_module, "BIN_EDGES", len(pairs) // 6)
    seen_edges, seen_nodes, first_group = {}, [], 0
    for nodes, n, edges, bin_weights, bin_groups, _ in cluster_module._bins(600, pairs, weights, groups, None):
        assert n == len(nodes) and nodes.tolist() == sorted(nodes.tolist())
        assert bin_groups.tolist() == (groups[nodes] - first_group).tolist()  # consecutive graphs, dense labels
        assert set(bin_groups.tolist()) == set(range(bin_groups.max() + 1))
        first_group += int(bin_groups.max()) + 1
        keys = edges[:, 0] * n + edges[:, 1]
        assert (np.diff(keys) > 0).all()  # still sorted
        seen_edges.update({(int(nodes[a]), int(nodes[b])): w for (a, b), w in zip(edges, bin_weights)})
        seen_nodes.extend(nodes.tolist())
    assert sorted(seen_nodes) == list(range(600))
    assert seen_edges == {(int(a), int(b)): w for (a, b), w in zip(pairs, weights)}
    assert first_group == 40


def test_make_engine_rejects_unknown():
    with pytest.raises(ValueError, match="unknown graph engine"):
        make_engine("networkx")


# ------------------------------------------------------------------ cluster(): the communities table

def _graph_tables():
    n, edges, weights = hierarchical_graph()
    eids = [ids.entity_id(f"e{i:02d}") for i in range(n)]
    entities = pa.table({"entity_id": eids, "chunk_ids": [[f"c{i}", f"c{i // 4}x"] for i in range(n)]})
    rel = {}
    for (a, b), w in zip(edges.tolist(), weights.tolist()):
        s, t = sorted((eids[a], eids[b]))
        rel[ids.relationship_id(s, t)] = (s, t, w)
    relationships = pa.table({
        "relationship_id": list(rel), "source_id": [v[0] for v in rel.values()],
        "target_id": [v[1] for v in rel.values()], "weight": [v[2] for v in rel.values()],
    })
    return entities, relationships


def test_cluster_table():
    entities, relationships = _graph_tables()
    cfg = ClusterConfig(max_cluster_size=10)
    table = cluster(entities, relationships, cfg)
    contracts.schema("communities").validate(table)
    rows = table.to_pylist()
    by_id = {r["community_id"]: r for r in rows}
    all_entities = set(entities.column("entity_id").to_pylist())
    level0 = [r for r in rows if r["level"] == 0]
    assert sorted(e for r in level0 for e in r["entity_ids"]) == sorted(all_entities)
    chunks_of = dict(zip(entities.column("entity_id").to_pylist(), entities.column("chunk_ids").to_pylist()))
    rels = relationships.to_pylist()
    assert sorted(r["human_id"] for r in rows) == list(range(len(rows)))
    for r in rows:
        assert r["community_id"] == ids.community_id(r["level"], r["entity_ids"])
        assert r["size"] == len(r["entity_ids"])
        members = set(r["entity_ids"])
        inside = sorted(x["relationship_id"] for x in rels if x["source_id"] in members and x["target_id"] in members)
        assert r["relationship_ids"] == inside
        assert r["n_chunks"] == len({c for e in members for c in chunks_of[e]})
        if r["parent_id"] is not None:
            parent = by_id[r["parent_id"]]
            assert r["community_id"] in parent["children_ids"] and parent["level"] == r["level"] - 1
        if r["children_ids"]:
            kids = [by_id[k] for k in r["children_ids"]]
            assert sorted(e for k in kids for e in k["entity_ids"]) == sorted(members)
    assert any(r["level"] > 0 for r in rows)
    assert cluster(entities, relationships, cfg).equals(table)  # reproducible


def test_chunk_lists_scanned_in_batches_cluster_as_the_table_does(monkeypatch):
    entities, relationships = _graph_tables()
    entities = entities.take(np.random.default_rng(3).permutation(entities.num_rows))  # any row order
    entity_ids = sorted(entities.column("entity_id").to_pylist())
    every_chunk = pa.array(sorted({c for cs in entities.column("chunk_ids").to_pylist() for c in cs} | {"c-unlisted"}))
    scanned = ChunkLists.scan(iter(entities.to_batches(max_chunksize=3)), entity_ids, every_chunk)
    whole = ChunkLists.of(entities, entity_ids)
    def pairs(lists):
        return sorted(zip(lists.owner.tolist(), lists.names.take(pa.array(lists.codes)).to_pylist()))

    assert pairs(scanned) == pairs(whole)
    # the chunk ids are hashed once a run of batches, not once a batch (0.3 s each at 1.2M chunks)
    lookups = []
    index_in = pc.index_in

    def counted(values, value_set, **kwargs):
        lookups.append(len(value_set))
        return index_in(values, value_set=value_set, **kwargs)

    monkeypatch.setattr(pc, "index_in", counted)
    assert pairs(ChunkLists.scan(iter(entities.to_batches(max_chunksize=3)), entity_ids, every_chunk)) == pairs(whole)
    assert lookups.count(len(every_chunk)) == 1 and entities.num_rows > 6
    # the chunks table's ids are distinct already, and only distinct codes are counted: they are
    # neither made distinct nor sorted again (0.9 s of every update at 1.2M chunks)
    def refused(*args, **kwargs):
        raise AssertionError("unique or sort of the chunk ids")

    monkeypatch.setattr(pc, "unique", refused)
    monkeypatch.setattr(pc, "sort_indices", refused)
    shuffled = every_chunk.take(pa.array(np.random.default_rng(4).permutation(len(every_chunk))))
    assert pairs(ChunkLists.scan(iter(entities.to_batches(max_chunksize=3)), entity_ids, shuffled)) == pairs(whole)
    monkeypatch.undo()
    cfg = ClusterConfig(max_cluster_size=10)
    parts = cluster_parts(entities.select(["entity_id"]), relationships, cfg, chunks=scanned)
    table = pa.concat_tables(parts)
    assert table.take(pc.sort_indices(table.column("human_id"))).equals(cluster(entities, relationships, cfg))
    with pytest.raises(KeyError, match="is not in the chunks table"):
        ChunkLists.scan(iter(entities.to_batches()), entity_ids, pa.array(["c1"]))


def test_cluster_empty_graph():
    table = cluster(contracts.empty("entities"), contracts.empty("relationships"), ClusterConfig())
    assert table.num_rows == 0


# ------------------------------------------------------------------ warm start (incremental runs)

def _ring_tables(m, n=12):
    """Entities e0..e{m-1} of a 12-node ring with two chords, restricted to the first m nodes."""
    eids = [ids.entity_id(f"ring{i}") for i in range(n)]
    edges = [(i, (i + 1) % n) for i in range(n)] + [(0, 6), (3, 9)]
    entities = pa.table({"entity_id": eids[:m], "chunk_ids": [[f"c{i}"] for i in range(m)]})
    rel = {}
    for a, b in edges:
        if a < m and b < m:
            s, t = sorted((eids[a], eids[b]))
            rel[ids.relationship_id(s, t)] = (s, t)
    relationships = pa.table({"relationship_id": list(rel), "source_id": [v[0] for v in rel.values()],
                              "target_id": [v[1] for v in rel.values()], "weight": [1.0] * len(rel)})
    return entities, relationships


def _cluster_warm(*args, **kwargs):
    import inspect

    if "previous" not in inspect.signature(cluster).parameters:
        pytest.skip("this version of cluster() has no warm start")
    return cluster(*args, **kwargs)


@pytest.mark.parametrize("engine", ["igraph", "leidenalg"])
def test_warm_start_from_an_identical_graph_keeps_every_community(engine):
    cfg = ClusterConfig(engine=engine, max_cluster_size=4)
    entities, relationships = _graph_tables()
    cold = cluster(entities, relationships, cfg)
    warm = _cluster_warm(entities, relationships, cfg, previous=cold)
    contracts.schema("communities").validate(warm)
    assert sorted(warm.column("community_id").to_pylist()) == sorted(cold.column("community_id").to_pylist())


@pytest.mark.parametrize(
    "engine",
    [
        "igraph",
        "leidenalg",
    ],
)
def test_warm_start_with_a_new_entity(engine):
    cfg = ClusterConfig(engine=engine, max_cluster_size=4)
    previous = cluster(*_ring_tables(11), cfg)
    entities, relationships = _ring_tables(12)
    table = _cluster_warm(entities, relationships, cfg, previous=previous)
    level0 = [e for r in table.to_pylist() if r["level"] == 0 for e in r["entity_ids"]]
    assert sorted(level0) == sorted(entities.column("entity_id").to_pylist())


# ------------------------------------------------------------------ one engine run per level

def _union(*graphs):
    """Disjoint union of (n, edges, weights) graphs: (n, edges, weights, graph label per node)."""
    offsets = np.cumsum([0] + [g[0] for g in graphs])
    edges = np.concatenate([g[1] + off for g, off in zip(graphs, offsets)])
    weights = np.concatenate([g[2] for g in graphs])
    groups = np.repeat(np.arange(len(graphs)), [g[0] for g in graphs])
    return int(offsets[-1]), edges, weights, groups


@pytest.mark.parametrize("engine", ["igraph", "leidenalg"])
def test_partition_groups_optimizes_each_graph_by_its_own_modularity(engine):
    # a small graph beside a much heavier one: with one modularity over the union, the small
    # graph's null model would use the union's total weight and merge its blocks
    small = planted_partition([10, 10, 10], 0.9, 0.03, seed=3)[:3]
    big_n, big_edges, big_weights, _ = planted_partition([40] * 6, 0.5, 0.02, seed=4)
    big = (big_n, big_edges, big_weights * 20)
    n, edges, weights, groups = _union(small, big)
    labels = partition_groups(make_engine(engine), n, edges, weights, groups, resolution=1.0, seed=1, n_iterations=5)
    assert all(len(set(groups[labels == label])) == 1 for label in set(labels.tolist()))  # never across graphs
    for g, (gn, gedges, gweights) in enumerate((small, big)):
        alone = make_engine(engine).partition(gn, gedges, gweights, resolution=1.0, seed=1, n_iterations=5)
        batched = labels[groups == g]
        assert len(set(batched.tolist())) == len(set(alone.tolist()))
        assert modularity(gn, gedges, gweights, batched) == pytest.approx(modularity(gn, gedges, gweights, alone), abs=0.01)


def test_group_node_weights_make_cpm_equal_modularity():
    n, edges, weights, groups = _union(planted_partition([8, 8], 0.8, 0.1, seed=5)[:3],
                                       planted_partition([6, 6, 6], 0.8, 0.1, seed=6)[:3])
    node_w = group_node_weights(n, edges, weights, groups)
    labels = np.random.default_rng(0).integers(0, 3, n) + 3 * groups  # any partition within the graphs
    cpm = sum(weights[(labels[edges[:, 0]] == c) & (labels[edges[:, 1]] == c)].sum() - node_w[labels == c].sum() ** 2 / 2
              for c in set(labels.tolist()))
    expected = 0.0
    for g in (0, 1):
        mine = groups[edges[:, 0]] == g
        nodes = np.flatnonzero(groups == g)
        local = np.full(n, -1)
        local[nodes] = np.arange(len(nodes))
        expected += modularity(len(nodes), local[edges[mine]], weights[mine], labels[nodes]) * weights[mine].sum()
    assert cpm == pytest.approx(expected)


def test_cugraph_engine_routes_small_graphs_to_igraph_without_a_gpu():
    from graphwright.engines.graph.cugraph_engine import CugraphEngine

    n, edges, weights = hierarchical_graph()
    cfg = ClusterConfig(max_cluster_size=10)
    engine = CugraphEngine(gpu_min_edges=10**9)  # every graph is below the GPU threshold: no cugraph import
    communities = hierarchical_leiden(n, edges, weights, cfg, engine)
    check_hierarchy(n, communities, 10, edges, IgraphEngine(), cfg)
    assert max(c.level for c in communities) >= 1


def test_levels_split_in_bins_give_the_same_hierarchy_in_any_number_of_processes(monkeypatch):
    import graphwright.stages.cluster.hierarchy as cluster_module

    n, edges, weights, _ = planted_partition([30] * 12, 0.4, 0.01, seed=8)
    monkeypatch.setattr(cluster_module, "BIN_EDGES", len(edges) // 5)  # several bins per level
    cfg = ClusterConfig(max_cluster_size=8, n_iterations=2)
    jobs = list(cluster_module._bins(n, edges, weights, np.repeat(np.arange(12), 30), None))
    assert len(jobs) > 1 and sorted(np.concatenate([j[0] for j in jobs]).tolist()) == list(range(n))
    usage = {}
    pooled = hierarchical_leiden(n, edges, weights, cfg, IgraphEngine(), workers=2, usage=usage)
    alone = hierarchical_leiden(n, edges, weights, cfg, IgraphEngine(), workers=1)
    check_hierarchy(n, pooled, 8, edges, IgraphEngine(), cfg)
    assert max(c.level for c in pooled) >= 1
    assert [(c.level, c.members.tolist(), c.parent) for c in pooled] == [(c.level, c.members.tolist(), c.parent) for c in alone]
    assert usage["worker_cpu_s"] > 0  # the pool's processes report what they used


def test_a_lazy_pool_starts_its_processes_at_the_first_level_with_bins_to_share(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    import graphwright.stages.cluster.hierarchy as cluster_module

    n, edges, weights, labels = planted_partition([30] * 12, 0.4, 0.01, seed=8)
    inside = labels[edges[:, 0]] == labels[edges[:, 1]]
    edges, weights = edges[inside], weights[inside]
    started = []
    monkeypatch.setattr(cluster_module, "_start_pool", lambda workers: started.append(workers) or ThreadPoolExecutor(workers))
    options = {"resolution": 1.0, "seed": 1, "n_iterations": 2}
    with cluster_module._pool(2, 10**9, lazy=True) as pool:
        one_bin = partition_groups(IgraphEngine(), n, edges, weights, labels, pool=pool, **options)
        assert not started  # a level of one bin runs on the driver: no process was started for it
        monkeypatch.setattr(cluster_module, "BIN_EDGES", len(edges) // 5)
        several = partition_groups(IgraphEngine(), n, edges, weights, labels, pool=pool, **options)
        assert started == [2]
    assert len(set(one_bin.tolist())) >= 12 and len(set(several.tolist())) >= 12


def test_graph_hash_identifies_the_weighted_graph_whatever_the_row_order():
    from graphwright.stages.cluster.communities import graph_hash

    entities = pa.table({"entity_id": ["e1", "e2", "e3"]})
    rels = pa.table({"relationship_id": ["r1", "r2"], "weight": [1.0, 2.5]})
    same = graph_hash(entities, rels)
    shuffled = pa.Table.from_batches([pa.record_batch({"relationship_id": ["r2"], "weight": [2.5]}),
                                      pa.record_batch({"relationship_id": ["r1"], "weight": [1.0]})])
    assert graph_hash(entities.take([2, 0, 1]), shuffled) == same
    assert graph_hash(entities.slice(1).append_column("x", pa.array([0, 0])).select(["entity_id"]), rels) != same
    assert graph_hash(entities, rels.set_column(1, "weight", pa.array([1.0, 2.5000001]))) != same
    assert graph_hash(entities, pa.table({"relationship_id": ["r1", "r3"], "weight": [1.0, 2.5]})) != same
    # the same bytes cut differently are another graph
    assert graph_hash(pa.table({"entity_id": ["ab", "c"]}), rels) != graph_hash(pa.table({"entity_id": ["a", "bc"]}), rels)
    assert graph_hash(entities.slice(0, 0), rels.slice(0, 0)) == graph_hash(entities.slice(0, 0), rels.slice(0, 0))


def test_modularity_is_igraphs():
    """engines.graph.modularity (numpy, run by every update's quality check) equals igraph's."""
    from graphwright.engines.graph.graphs import igraph_graph

    rng = np.random.default_rng(11)
    n = 400
    edges = rng.integers(0, n, (3000, 2))
    edges = np.unique(np.sort(edges[edges[:, 0] != edges[:, 1]], axis=1), axis=0)
    weights = rng.uniform(0.1, 3.0, len(edges))
    for k in (1, 7, 40):
        labels = rng.integers(0, k, n)
        expected = igraph_graph(n, edges).modularity(labels.tolist(), weights=weights.tolist())
        assert modularity(n, edges, weights, labels) == pytest.approx(expected, abs=1e-12)


def test_a_partition_in_another_thread_is_the_one_the_main_thread_gets():
    """igraph's random generator is per thread: an update runs its fresh top level in a thread,
    and its communities (so its reports) must not vary from run to run."""
    import threading

    rng = np.random.default_rng(0)
    n = 5000
    edges = rng.integers(0, n, (30_000, 2))
    edges = edges[edges[:, 0] != edges[:, 1]]
    weights = rng.random(len(edges))
    engine = IgraphEngine()
    want = engine.partition(n, edges, weights, resolution=1.0, seed=7, n_iterations=2)
    got = [None] * 3

    def part(i):
        got[i] = engine.partition(n, edges, weights, resolution=1.0, seed=7, n_iterations=2)

    threads = [threading.Thread(target=part, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(g, want) for g in got)


@pytest.mark.parametrize("engine", ["igraph", "leidenalg"])
def test_a_graph_engine_imports_igraph_without_matplotlib(engine):
    """python-igraph imports matplotlib.pyplot whenever it is installed (0.4-0.7 s per process
    that clusters): the engines import it with matplotlib hidden, and matplotlib stays importable."""
    import subprocess
    import sys

    code = f"""
import sys
import numpy as np
from graphwright.engines.graph import make_engine
labels = make_engine({engine!r}).partition(4, np.array([[0, 1], [2, 3]]), np.ones(2), resolution=1.0, seed=1, n_iterations=2)
assert len(set(labels[:2])) == 1 and labels[0] != labels[2], labels
assert "igraph" in sys.modules and "matplotlib" not in sys.modules, sorted(m for m in sys.modules if "matplotlib" in m)[:5]
import matplotlib.pyplot
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_thread_never_gets_igraph_half_imported(monkeypatch):
    """While one thread imports igraph, sys.modules already holds the half-initialized module: a
    second thread waits for the import instead of taking it (a Ray nightly job failed with
    "partially initialized module 'igraph' has no attribute 'Graph'")."""
    import sys
    import threading
    import types

    import igraph

    import graphwright.engines.graph.graphs as graphs

    monkeypatch.setattr(graphs, "_LOADED", None, raising=False)
    importing, got = threading.Event(), []

    def first_import():  # what an import in progress looks like to the other threads
        with graphs._IMPORTING:
            sys.modules["igraph"] = types.ModuleType("igraph")
            importing.set()
            threading.Event().wait(0.3)
            sys.modules["igraph"] = igraph

    first = threading.Thread(target=first_import)
    first.start()
    importing.wait()
    second = threading.Thread(target=lambda: got.append(graphs.load_igraph()))
    second.start()
    first.join()
    second.join()
    assert got and hasattr(got[0], "Graph")


def test_the_cluster_pools_workers_have_igraph_without_matplotlib():
    """The pools' forkserver preloads igraph for its workers, without matplotlib."""
    import subprocess
    import sys

    code = """
from graphwright.stages.cluster.hierarchy import _start_pool
with _start_pool(1) as pool:
    loaded = pool.submit(eval, "[m in __import__('sys').modules for m in ('igraph', 'matplotlib')]").result()
assert loaded == [True, False], loaded
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
