"""Incremental clustering: an update moves only the entities it touched (Leiden over units of
untouched co-members), every community without a touched member keeps its members and subtree,
and the top level's modularity stays within 0.002 of a fresh full clustering of the same graph."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from graphwright.config import ClusterConfig
from graphwright.engines.graph import make_engine
from graphwright.engines.graph.graphs import modularity
from graphwright.stages.cluster.hierarchy import hierarchical_leiden, listing
from graphwright.stages.cluster.incremental import as_previous, graph_changes, graph_sum, incremental_levels, top_labels
from graphwright.stages.resolve.pair_cache import stable_hashes

CONFIG = ClusterConfig(max_cluster_size=12, seed=3)


def planted(sizes, p_in, p_out, seed):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(sizes)), sizes)
    i, j = np.triu_indices(len(labels), 1)
    keep = rng.random(len(i)) < np.where(labels[i] == labels[j], p_in, p_out)
    return len(labels), np.column_stack([i[keep], j[keep]]), rng.uniform(0.5, 2.0, int(keep.sum()))


def test_an_update_repartitions_only_the_touched_communities():
    engine = make_engine("igraph")
    n, edges, weights = planted([40] * 10, 0.3, 0.004, seed=1)
    before = hierarchical_leiden(n, edges, weights, CONFIG, engine)
    ids = [f"e{i:04d}" for i in range(n)]
    # the update: a new entity tied into block 0, and a few more edges inside block 1
    new_ids = ids + ["e9999"]
    extra = np.array([[n, 0], [n, 1], [n, 2], [40, 45], [41, 47], [42, 49]])
    new_edges = np.concatenate([edges, extra])
    new_weights = np.concatenate([weights, np.ones(len(extra))])
    touched, changed_new, changed_old, new_nodes = graph_changes(
        pa.array(ids), edges, weights, new_ids, new_edges, new_weights)
    assert new_nodes.sum() == 1 and len(changed_new) == len(extra) and not len(changed_old)
    levels, stats = incremental_levels(n + 1, new_edges, new_weights, CONFIG, engine, as_previous(before), touched,
                                       stable_hashes(new_ids))
    after = listing(levels)
    assert stats["top_communities_kept"] >= 6 and stats["subtrees_reused"] >= 1
    # confinement: an untouched top-level community keeps its members and its whole subtree
    touched_tops = {k for k, c in enumerate(c for c in before if c.level == 0) if touched[c.members].any()}
    kept = {tuple(c.members) for k, c in enumerate(c for c in before if c.level == 0) if k not in touched_tops}
    assert kept <= {tuple(c.members) for c in after if c.level == 0}

    def subtree(communities, root_members):
        root = next(i for i, c in enumerate(communities) if c.level == 0 and tuple(c.members) == root_members)
        out, todo = set(), [root]
        while todo:
            i = todo.pop()
            out.add((communities[i].level, tuple(communities[i].members)))
            todo.extend(communities[i].children)
        return out

    for members in kept:
        assert subtree(before, members) == subtree(after, members)
    # quality: top-level modularity within 0.002 of a fresh full clustering of the new graph
    fresh = hierarchical_leiden(n + 1, new_edges, new_weights, CONFIG, engine)
    q_update = modularity(n + 1, new_edges, new_weights, top_labels(after, n + 1))
    q_fresh = modularity(n + 1, new_edges, new_weights, top_labels(fresh, n + 1))
    assert q_update >= q_fresh - 0.002
    # every node is in exactly one top-level community, and children partition their parent
    assert sorted(np.concatenate([c.members for c in after if c.level == 0]).tolist()) == list(range(n + 1))
    for c in after:
        if c.children:
            assert sorted(np.concatenate([after[k].members for k in c.children]).tolist()) == c.members.tolist()


def test_graph_sum_is_order_free_and_follows_weights():
    n, edges, weights = planted([10, 10], 0.5, 0.1, seed=2)
    h = stable_hashes([f"e{i}" for i in range(n)])
    order = np.random.default_rng(0).permutation(len(edges))
    assert graph_sum(h, edges, weights) == graph_sum(h, edges[order][:, ::-1], weights[order])
    changed = weights.copy()
    changed[0] += 1
    assert graph_sum(h, edges, weights) != graph_sum(h, edges, changed)


def _people(src):
    src.mkdir()
    people = ["Alice Moreau", "Bruno Keller", "Chidi Okafor", "Dana Whitfield", "Emil Novak", "Farah Haddad", "Goran Petrov",
              "Hana Ito", "Ivo Lind"]
    for d in range(8):
        (src / f"d{d}.txt").write_text(" ".join(f"{people[(d + i) % 9]} met {people[(d + 2 * i + 1) % 9]} in Port Elling."
                                                for i in range(4)))
    return src


@pytest.mark.parametrize("edit", [False, True])
def test_changed_cluster_settings_cluster_in_full_as_a_fresh_build_would(tmp_path, edit, monkeypatch):
    """The state and the graph hash say which graph was clustered, not under which settings: a
    run under others (here a higher resolution, with or without a changed document) must not
    keep the old hierarchy, nor start Leiden from it."""
    import json

    import graphwright.stages.cluster as cluster_stage

    starts = []
    parts = cluster_stage.cluster_parts
    monkeypatch.setattr(cluster_stage, "cluster_parts",
                        lambda *args, previous=None, **kwargs: starts.append(previous.num_rows) or parts(*args, previous=previous, **kwargs))

    from graphwright.config import load_config
    from graphwright.pipeline.runner import run_index
    from graphwright.storage.delta import IndexStore

    def run(index, resolution):
        config = load_config(overrides={"execution": {"executor": "local"}, "embed": {"engine": "hashing", "dim": 32},
                                        "cluster": {"max_cluster_size": 3, "resolution": resolution}})
        summary = run_index([str(src)], index, config, show_progress=False, log=lambda m: None)
        store = IndexStore(index)
        rows = store.read("communities", columns=["level", "entity_ids"]).to_pylist()
        details = json.loads(store.read("stage_metrics", where=f"run_id = '{summary['run_id']}' AND stage = 'cluster'")
                             .to_pylist()[0]["details"])
        return sorted((r["level"], tuple(sorted(r["entity_ids"]))) for r in rows), details

    src = _people(tmp_path / "src")
    before, _ = run(tmp_path / "index", 1.0)
    assert len(before) == 1  # one community of every entity
    if edit:
        (src / "d0.txt").write_text("Hana Ito wrote to Ivo Lind near Kestrel Island. Ivo Lind thanked Hana Ito.")
    after, details = run(tmp_path / "index", 3.0)
    assert details["incremental"] is False and not details.get("skipped")
    assert starts[-1] == 0  # a cold start, as a fresh build's
    assert after == run(tmp_path / "fresh", 3.0)[0] and len(after) > 1
    # the next update under the same settings is incremental again
    (src / "d9.txt").write_text("Jonas Berg met Alice Moreau in Amberfield.")
    assert run(tmp_path / "index", 3.0)[1]["incremental"] is True


def test_patched_communities_table_stays_consistent_with_the_graph(tmp_path):
    import json

    from graphwright.config import load_config
    from graphwright.pipeline.runner import run_index
    from graphwright.storage.delta import IndexStore

    config = load_config(overrides={"execution": {"executor": "local"}, "embed": {"engine": "hashing", "dim": 32},
                                    "ingest": {"max_delete_fraction": 1.0}, "cluster": {"max_cluster_size": 3}})
    src = _people(tmp_path / "src")
    run_index([str(src)], tmp_path / "index", config, show_progress=False, log=lambda m: None)
    (src / "d0.txt").write_text("Hana Ito wrote to Ivo Lind near Kestrel Island. Ivo Lind thanked Hana Ito.")
    (src / "d9.txt").write_text("Jonas Berg met Alice Moreau in Amberfield.")
    summary = run_index([str(src)], tmp_path / "index", config, show_progress=False, log=lambda m: None)
    store = IndexStore(tmp_path / "index")
    details = json.loads(store.read("stage_metrics", where=f"run_id = '{summary['run_id']}' AND stage = 'cluster'")
                         .to_pylist()[0]["details"])
    assert details["incremental"] is True
    communities = store.read("communities").to_pylist()
    entities = {e["entity_id"]: e for e in store.read("entities").to_pylist()}
    rels = store.read("relationships").to_pylist()
    by_id = {c["community_id"]: c for c in communities}
    assert len({c["human_id"] for c in communities}) == len(communities)
    for level in {c["level"] for c in communities}:
        members = [e for c in communities if c["level"] == level for e in c["entity_ids"]]
        assert len(members) == len(set(members))
    assert sorted(e for c in communities if c["level"] == 0 for e in c["entity_ids"]) == sorted(entities)
    for c in communities:
        inside = set(c["entity_ids"])
        assert c["n_chunks"] == len({ch for e in inside for ch in entities[e]["chunk_ids"]})
        assert c["relationship_ids"] == sorted(r["relationship_id"] for r in rels if r["source_id"] in inside and r["target_id"] in inside)
        assert all(by_id[k]["parent_id"] == c["community_id"] for k in c["children_ids"])
        if c["parent_id"]:
            assert c["community_id"] in by_id[c["parent_id"]]["children_ids"]


def test_only_touched_entities_move_at_any_level():
    """Untouched entities keep their co-members at every level: a community without a touched
    member is one the previous hierarchy had, so only the communities of touched entities (and
    their ancestors) get new members, new ids, and new reports."""
    engine = make_engine("igraph")
    n, edges, weights = planted([60] * 8, 0.25, 0.01, seed=5)
    config = ClusterConfig(max_cluster_size=8, seed=3)
    before = hierarchical_leiden(n, edges, weights, config, engine)
    ids = [f"e{i:04d}" for i in range(n)]
    new_ids = ids + ["e9999"]
    extra = np.array([[n, 0], [n, 1], [n, 2], [60, 65], [61, 67], [130, 200]])
    new_edges, new_weights = np.concatenate([edges, extra]), np.concatenate([weights, np.ones(len(extra))])
    touched, *_ = graph_changes(pa.array(ids), edges, weights, new_ids, new_edges, new_weights)
    levels, stats = incremental_levels(n + 1, new_edges, new_weights, config, engine, as_previous(before), touched,
                                       stable_hashes(new_ids))
    after = listing(levels)
    assert max(c.level for c in after) >= 2  # the splits below the top level are exercised
    previous = {(c.level, tuple(c.members)) for c in before}
    untouched = [c for c in after if not touched[c.members].any()]
    assert untouched and all((c.level, tuple(c.members)) in previous for c in untouched)
    # and every community's untouched members are those of a previous community at its level
    moving = np.flatnonzero(touched)
    for c in after:
        stay = np.setdiff1d(c.members, moving)
        assert not len(stay) or any(np.array_equal(stay, np.setdiff1d(o.members, moving)) for o in before if o.level == c.level)
    fresh = hierarchical_leiden(n + 1, new_edges, new_weights, config, engine)
    assert modularity(n + 1, new_edges, new_weights, top_labels(after, n + 1)) >= \
        modularity(n + 1, new_edges, new_weights, top_labels(fresh, n + 1)) - 0.002


def _stale_hierarchy():
    """Ten planted blocks, a previous hierarchy that no longer fits them (top-level communities
    that cut across the blocks) and two touched entities."""
    n, edges, weights = planted([40] * 10, 0.3, 0.004, seed=1)
    ids = [f"e{i:04d}" for i in range(n)]
    stale = [[(np.arange(k, n, 5), None, f"c{k}") for k in range(5)]]
    touched, *_ = graph_changes(pa.array(ids), edges, weights, ids, edges, weights)
    touched[[0, 41]] = True
    return n, edges, weights, ids, stale, touched


def test_an_update_takes_leiden_over_all_entities_when_units_fall_behind():
    """Units never re-optimize what a change did not touch: when the previous hierarchy is far
    from what the graph now holds, the refresh check takes Leiden over all entities."""
    engine = make_engine("igraph")
    n, edges, weights, ids, stale, touched = _stale_hierarchy()
    fresh = modularity(n, edges, weights, top_labels(hierarchical_leiden(n, edges, weights, CONFIG, engine), n))
    quality = {}
    for gain in (None, 0.001):
        config = CONFIG.model_copy(update={"refresh_gain": gain})
        levels, stats = incremental_levels(n, edges, weights, config, engine, stale, touched, stable_hashes(ids))
        quality[gain] = modularity(n, edges, weights, top_labels(listing(levels), n))
    assert quality[None] < fresh - 0.1  # the units keep the stale cut
    assert quality[0.001] >= fresh - 0.002 and stats["refreshed"]


def test_the_refresh_check_runs_its_first_iterations_and_a_top_level_it_takes_gets_the_rest():
    """The check's fresh clustering is Leiden's first `refresh_iterations` iterations (the wait an
    update has for it); a top level it replaces is given the build's remaining iterations, warm-
    started from it, and is no worse than what the check measured."""
    engine, calls = make_engine("igraph"), []

    class Recording:  # the partitions over every entity as one graph (not the units', not a level's groups)
        holds_gil = engine.holds_gil

        def partition(self, n_, edges_, weights_, **options):
            labels = engine.partition(n_, edges_, weights_, **options)
            if n_ == n and options.get("groups") is None and options.get("strength") is None:
                calls.append((options["n_iterations"], options.get("initial"), labels))
            return labels

    n, edges, weights, ids, stale, touched = _stale_hierarchy()
    config = CONFIG.model_copy(update={"refresh_gain": 0.001, "n_iterations": 5, "refresh_iterations": 2})
    levels, stats = incremental_levels(n, edges, weights, config, Recording(), stale, touched, stable_hashes(ids))
    assert stats["refreshed"] and [(k, initial is None) for k, initial, _ in calls] == [(2, True), (3, False)]
    assert np.array_equal(calls[1][1], calls[0][2])  # the rest, warm-started from the check's labels
    assert stats["modularity_refreshed"] >= stats["modularity_fresh"]
    assert modularity(n, edges, weights, top_labels(listing(levels), n)) == pytest.approx(stats["modularity_refreshed"], abs=1e-6)
    calls.clear()
    short = CONFIG.model_copy(update={"refresh_gain": 0.001, "n_iterations": 2, "refresh_iterations": 4})
    incremental_levels(n, edges, weights, short, Recording(), stale, touched, stable_hashes(ids))
    assert [(k, initial is None) for k, initial, _ in calls] == [(2, True)]  # never more than a build runs


def test_a_refreshed_top_level_keeps_the_checks_labels_where_the_rest_of_the_iterations_lose_ground(monkeypatch):
    """The polish may not undo the check: should the warm-started iterations score lower, the
    update takes the labels the check measured."""
    from graphwright.stages.cluster import incremental

    monkeypatch.setattr(incremental, "_polished", lambda n, *a, **k: np.zeros(n, np.int64))  # one community: modularity 0
    engine = make_engine("igraph")
    n, edges, weights, ids, stale, touched = _stale_hierarchy()
    config = CONFIG.model_copy(update={"refresh_gain": 0.001})
    levels, stats = incremental_levels(n, edges, weights, config, engine, stale, touched, stable_hashes(ids))
    assert stats["refreshed"] and stats["modularity_refreshed"] == stats["modularity_fresh"] > 0
    assert modularity(n, edges, weights, top_labels(listing(levels), n)) == pytest.approx(stats["modularity_fresh"], abs=1e-6)


def test_units_keep_the_graph_modularity():
    """Leiden over units optimizes the whole graph's modularity: any partition of the units has
    the modularity of the same partition of their members (inner edges kept as self-loops)."""
    from graphwright.stages.cluster.incremental import Units

    rng = np.random.default_rng(4)
    n, edges, weights = planted([30] * 6, 0.3, 0.02, seed=2)
    old = np.repeat(np.arange(6), 30)
    old[rng.choice(n, 10, replace=False)] = -1  # new entities
    touched = rng.random(n) < 0.1
    units = Units.of(old, touched, np.zeros(n, np.int64))
    assert units.count == 6 + int((touched | (old < 0)).sum()) - sum(
        not (~touched[old == k]).any() for k in range(6))  # a unit per kept community and per free node
    r_edges, r_weights = units.graph(edges, weights)
    for _ in range(5):
        labels = rng.integers(0, 4, units.count)
        assert modularity(units.count, r_edges, r_weights, labels) == pytest.approx(
            modularity(n, edges, weights, labels[units.unit]), abs=1e-12)


def test_the_fresh_top_level_of_a_large_graph_runs_in_a_process_when_the_engine_holds_the_gil(monkeypatch):
    """igraph keeps the GIL (and its RNG lock) through a partition: beside the update's own
    partitions it must run in a process, with the labels a thread would give."""
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from graphwright.stages.cluster import update
    from graphwright.stages.cluster.incremental import fresh_top

    engine = make_engine("igraph")
    n, edges, weights = planted([12, 12, 12], 0.6, 0.02, seed=5)
    assert isinstance(update._beside(engine, len(edges), True), ThreadPoolExecutor)  # small: not worth a process
    monkeypatch.setattr(update, "FRESH_PROCESS_EDGES", 1)
    # without the server the run starts (prepare), a process repays its start only from COLD_PROCESS_EDGES
    monkeypatch.setattr(update, "forkserver_started", lambda: False)
    assert isinstance(update._beside(engine, len(edges), True), ThreadPoolExecutor)
    monkeypatch.setattr(update, "forkserver_started", lambda: True)
    assert isinstance(update._beside(make_engine("leidenalg"), len(edges), False), ThreadPoolExecutor)  # not wanted
    expected = fresh_top(n, edges, weights, CONFIG, engine)
    with update._beside(engine, len(edges), True) as side:
        assert isinstance(side, ProcessPoolExecutor)
        assert np.array_equal(update._fresh_top_of(side, n, edges, weights, CONFIG, engine)(), expected)

    class Broken:
        def submit(self, *args):
            raise BrokenProcessPool("gone")
    assert np.array_equal(update._fresh_top_of(Broken(), n, edges, weights, CONFIG, engine)(), expected)


def test_prepare_starts_the_forkserver_only_where_the_update_will_want_its_process(monkeypatch):
    from graphwright.stages.cluster import update

    started = []
    monkeypatch.setattr(update, "start_forkserver", lambda: started.append(True))
    monkeypatch.setattr(update, "data_files", lambda store, name: [("part-0.parquet", 60_000), ("part-1.parquet", 90_000)])
    update.prepare(None, CONFIG.model_copy(update={"refresh_gain": None}), make_engine("igraph"))  # no fresh top level
    update.prepare(None, CONFIG, make_engine("igraph"))
    assert started == [True]
    monkeypatch.setattr(update, "data_files", lambda store, name: [("part-0.parquet", 60_000)])
    update.prepare(None, CONFIG, make_engine("igraph"))  # too small to repay a process
    assert started == [True]


def test_an_index_run_starts_the_forkserver_before_its_first_stage(tmp_path, monkeypatch):
    """The forkserver takes about 1.3 s of a core to start: the run starts it (the cluster stage's
    `prepare`) while ingest and extract leave a core idle, not when cluster begins."""
    import dataclasses

    from _helpers import make_config, run, two_documents

    from graphwright.pipeline import definition
    from graphwright.stages.cluster import update

    class Stop(Exception):
        pass

    events = []
    monkeypatch.setattr(update, "start_forkserver", lambda: events.append("forkserver"))
    monkeypatch.setattr(update, "FRESH_PROCESS_EDGES", 0)

    def first_stage(run_, metrics):
        events.append(definition.INDEX[0].name)
        raise Stop

    monkeypatch.setattr(definition, "INDEX", (dataclasses.replace(definition.INDEX[0], execute=first_stage), *definition.INDEX[1:]))
    corpus = two_documents(tmp_path)
    with pytest.raises(Stop):
        run([corpus], tmp_path / "index", make_config())
    assert events == ["forkserver", "ingest"]
    events.clear()
    with pytest.raises(Stop):  # a configuration without the update's quality check starts none
        run([corpus], tmp_path / "index", make_config(cluster={"refresh_gain": None}))
    assert events == ["ingest"]

    def failing(run_):
        raise OSError("no processes here")

    events.clear()
    stages = [dataclasses.replace(s, prepare=failing) if s.name == "cluster" else s for s in definition.INDEX]
    monkeypatch.setattr(definition, "INDEX", tuple(stages))
    logs = []
    with pytest.raises(Stop):  # a head start that fails is logged, and the run goes on
        run([corpus], tmp_path / "index", make_config(), logs=logs)
    assert events == ["ingest"]
    assert any("cluster: preparing failed (OSError: no processes here)" in line for line in logs)


@pytest.mark.parametrize("gain", [0.001, 5.0])
def test_a_refresh_check_made_after_the_levels_gives_the_levels_of_the_check_made_inline(gain):
    """cluster_update makes the units' levels (and their rows, `meanwhile`) first and checks them
    against the fresh top level after (computed in a process meanwhile): kept or replaced, the
    levels and stats are those of the check made where the units are partitioned, and what was
    made meanwhile is made again from levels that replace the units'."""
    from graphwright.stages.cluster.incremental import checked_levels, fresh_top

    engine = make_engine("igraph")
    n, edges, weights, ids, stale, touched = _stale_hierarchy()
    config = CONFIG.model_copy(update={"refresh_gain": gain})
    hashes = stable_hashes(ids)
    inline, inline_stats = incremental_levels(n, edges, weights, config, engine, stale, touched, hashes)
    asked, made = [], []

    def meanwhile(levels):
        made.append((len(asked), _listed(levels)))
        return len(made)
    levels, stats, result = checked_levels(n, edges, weights, config, engine, stale, touched, hashes, None, None,
                                           lambda: asked.append(1) or fresh_top(n, edges, weights, config, engine), meanwhile)
    assert asked == [1] and inline_stats["refreshed"] == (gain < 1)
    assert stats == inline_stats
    assert _listed(levels) == _listed(inline)
    assert made[0][0] == 0  # made before the fresh top level was waited for
    assert [m for _, m in made[1:]] == ([_listed(inline)] if gain < 1 else [])  # again only after a refresh
    assert result == len(made) and made[-1][1] == _listed(inline)


def _listed(levels):
    return [[(m.tolist(), p) for m, p in level] for level in levels]


def test_the_previous_levels_sort_every_communitys_members_in_one_sort(monkeypatch):
    """previous_levels: members in current positions, sorted, those that left dropped, parents by
    index; every community's members sorted together, not one sort each."""
    from graphwright.stages.cluster import incremental

    rng = np.random.default_rng(5)
    entity_ids = [f"e{i:03d}" for i in range(60)]
    rows, expected = [], []
    for level, count in ((0, 4), (1, 9)):
        for c in range(count):
            members = [f"e{i:03d}" for i in rng.choice(70, size=int(rng.integers(0, 12)), replace=False)]  # e060+: gone
            parent = f"c0-{c % 4}" if level else None
            rows.append({"community_id": f"c{level}-{c}", "level": level, "parent_id": parent, "entity_ids": members})
            expected.append((level, sorted(entity_ids.index(m) for m in members if m in entity_ids), parent and int(parent[-1])))
    table = pa.Table.from_pylist(rows[::-1])
    sorts, real = [], np.sort
    monkeypatch.setattr(np, "sort", lambda a, *args, **kw: sorts.append(len(a)) or real(a, *args, **kw))
    levels = incremental.previous_levels(table, entity_ids)
    monkeypatch.undo()
    assert len(sorts) <= 1
    got = [(level, m.tolist(), p) for level, items in enumerate(levels) for m, p, _ in items]
    assert got == [(level, m, p) for level, m, p in expected]
    assert [cid for items in levels for _, _, cid in items] == [r["community_id"] for r in rows]


def test_graph_changes_match_edges_by_sorted_values_not_argsort(monkeypatch):
    """The two graphs' edges are matched through orders made by sorting values (grouped_order),
    an entity gone and its edges lost included; the answer is a brute-force comparison's."""
    rng = np.random.default_rng(7)
    n, edges, weights = planted([30] * 8, 0.3, 0.01, seed=4)
    ids = [f"e{i:04d}" for i in range(n)]
    keep = rng.random(len(edges)) > 0.05  # some edges go
    new_weights = np.where(rng.random(len(edges)) < 0.05, weights + 1, weights)[keep]  # some reweighted
    new_ids = [i for i in ids if i != "e0003"] + ["e9999"]  # one entity goes, one comes
    at = {e: k for k, e in enumerate(new_ids)}
    old_pairs = [(ids[a], ids[b]) for a, b in edges[keep]]
    stays = np.array([a in at and b in at for a, b in old_pairs])
    new_edges = np.array([[at[a], at[b]] for (a, b), s in zip(old_pairs, stays) if s] + [[at["e9999"], 0], [at["e0010"], at["e0050"]]])
    new_weights = np.concatenate([new_weights[stays], [1.0, 1.0]])

    def refused(*args, **kwargs):
        raise AssertionError("np.argsort")

    monkeypatch.setattr(np, "argsort", refused)
    touched, changed_new, changed_old, new_nodes = graph_changes(pa.array(ids), edges, weights, new_ids, new_edges, new_weights)
    monkeypatch.undo()
    old_w = {tuple(sorted((ids[a], ids[b]))): w for (a, b), w in zip(edges, weights)}
    new_w = {tuple(sorted((new_ids[a], new_ids[b]))): w for (a, b), w in zip(new_edges, new_weights)}
    assert sorted(changed_new.tolist()) == [k for k, (a, b) in enumerate(new_edges)
                                            if old_w.get(tuple(sorted((new_ids[a], new_ids[b])))) != new_weights[k]]
    assert sorted(changed_old.tolist()) == [k for k, (a, b) in enumerate(edges)
                                            if new_w.get(tuple(sorted((ids[a], ids[b])))) != weights[k]]
    assert new_nodes.tolist() == [i == "e9999" for i in new_ids]
    ends = {new_ids[x] for k in changed_new for x in new_edges[k]} | {ids[x] for k in changed_old for x in edges[k]} | {"e9999"}
    assert sorted(np.flatnonzero(touched).tolist()) == sorted(at[e] for e in ends if e in at)


def test_unit_edges_are_summed_by_counting_passes_not_hashed(monkeypatch):
    """The units' graph sums its edges through pair_inverse (two counting passes), not a hash of
    every edge's code; the answer is a brute-force sum."""
    import pyarrow.compute as pc

    from graphwright.stages.cluster.incremental import Units

    rng = np.random.default_rng(9)
    n, edges, weights = planted([20] * 5, 0.3, 0.03, seed=6)
    old = np.repeat(np.arange(5), 20)
    units = Units.of(old, rng.random(n) < 0.2, np.zeros(n, np.int64))
    want: dict[tuple[int, int], float] = {}
    for (a, b), w in zip(units.unit[edges].tolist(), weights.tolist()):
        want[(min(a, b), max(a, b))] = want.get((min(a, b), max(a, b)), 0.0) + w

    def refused(*args, **kwargs):
        raise AssertionError("hashed")

    monkeypatch.setattr(pc, "dictionary_encode", refused)
    got_edges, got_weights = units.graph(edges, weights)
    assert [tuple(e) for e in got_edges.tolist()] == sorted(want)
    assert got_weights.tolist() == pytest.approx([want[k] for k in sorted(want)])


def test_the_top_levels_edges_are_put_in_order_by_counting_passes(monkeypatch):
    """sorted_edges orders the edges by (source, target) with pair_order, not np.argsort of every
    edge's code (2.26M edges at 1.2M chunks, in the fresh top level's process)."""
    from graphwright.stages.cluster.hierarchy import sorted_edges

    rng = np.random.default_rng(12)
    n = 500
    codes = rng.choice(n * n, 3_000, replace=False)
    edges, weights = np.column_stack([codes // n, codes % n]), rng.random(3_000)
    order = np.argsort(codes)

    def refused(*args, **kwargs):
        raise AssertionError("np.argsort")

    monkeypatch.setattr(np, "argsort", refused)
    got_edges, got_weights = sorted_edges(n, edges, weights)
    assert got_edges.tolist() == edges[order].tolist() and got_weights.tolist() == weights[order].tolist()


def test_a_previous_child_whose_members_are_all_gone_is_not_kept_as_an_empty_community():
    engine = make_engine("igraph")
    n, edges, weights = planted([5, 5], 0.9, 0.02, seed=2)
    members = np.arange(n)
    prev = [[(members, None, "top")], [(members, 0, "kept"), (np.empty(0, np.int64), 0, "emptied")]]
    config = ClusterConfig(max_cluster_size=5, seed=3)
    levels, stats = incremental_levels(n, edges, weights, config, engine, prev, np.zeros(n, bool),
                                       stable_hashes([str(i) for i in range(n)]))
    assert all(len(m) for level in levels for m, _ in level)
    assert stats["splits"] == 1 and not stats["subtrees_reused"]  # split again, not given its old split


def test_a_table_whose_rows_name_different_graphs_is_clustered_again_without_a_state(tmp_path):
    """Without its state, cluster skips only when every community row names the current graph: an
    update killed between its patch and its state leaves kept rows naming the graph before it."""
    import pyarrow.compute as pc

    from graphwright.config import load_config
    from graphwright.pipeline.runner import run_index
    from graphwright.storage.delta import IndexStore

    config = load_config(overrides={"execution": {"executor": "local"}, "embed": {"engine": "hashing", "dim": 32},
                                    "cluster": {"max_cluster_size": 3, "resolution": 3.0}})
    src = _people(tmp_path / "src")
    run_index([str(src)], tmp_path / "index", config, show_progress=False, log=lambda m: None)
    store = IndexStore(tmp_path / "index")
    table = store.read("communities")
    assert table.num_rows > 1
    hashes = table.column("graph_hash").to_pylist()
    store.overwrite("communities", table.set_column(table.schema.get_field_index("graph_hash"), "graph_hash",
                                                     pa.array(hashes[:1] + ["an-older-graph"] * (len(hashes) - 1))))
    for path in [*store.files.list("state/cluster"), "state/cluster.json"]:
        store.files.delete(path)
    run_index([str(src)], tmp_path / "index", config, show_progress=False, log=lambda m: None)
    assert not pc.any(pc.equal(store.read("communities").column("graph_hash"), "an-older-graph")).as_py()


def test_the_refresh_check_compares_the_modularity_leiden_optimizes_at_the_configured_resolution():
    """At a low resolution one community of two joined cliques is the better partition: a fresh
    top level that splits them must not replace it for being better at resolution 1."""
    import igraph

    from graphwright.stages.cluster.incremental import _refreshed

    cliques = [(i, j) for block in (range(0, 5), range(5, 10)) for i in block for j in block if i < j]
    edges, weights = np.array(cliques + [(4, 5)]), np.ones(len(cliques) + 1)
    together, apart = np.zeros(10, np.int64), np.repeat([0, 1], 5)
    graph = igraph.Graph(n=10, edges=edges.tolist())
    for labels in (together, apart):
        for resolution in (0.05, 1.0):
            assert modularity(10, edges, weights, labels, resolution) == pytest.approx(
                graph.modularity(labels.tolist(), weights=weights.tolist(), resolution=resolution))
    stats: dict = {}
    low = ClusterConfig(resolution=0.05, refresh_gain=0.001)
    kept = _refreshed(10, edges, weights, together, low, make_engine("igraph"), stats, lambda: apart)
    assert stats["refreshed"] is False and kept is together
