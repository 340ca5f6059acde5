"""The cluster stage's update path: the previous graph from state/cluster, the hierarchy from
stages.cluster.incremental, and only the changed communities' rows, patched into the table."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.stages.cluster.communities import ChunkLists, entity_positions
from graphwright.stages.cluster.hierarchy import _pool, _start_pool, forkserver_started, listing, start_forkserver
from graphwright.stages.cluster.incremental import (checked_levels, fresh_top, graph_changes, graph_digest, graph_sum,
                                                    incremental_levels, previous_levels)
from graphwright.stages.resolve.pair_cache import stable_hashes
from graphwright.storage import contracts
from graphwright.storage.changes import changes_since
from graphwright.storage.patch import data_files, patch_table
from graphwright.util.laps import Laps
from graphwright.util.numeric import distinct_lists, sorted_codes, to_numpy

STATE = "state/cluster"
# the quality check gets a process of its own from this many edges when the run started the
# process server (prepare): at 145k chunks (428k edges) the fresh Leiden (0.7-0.9 s, five
# iterations; two take 0.3-0.5 s) in a thread stalled the update, and in such a process cluster
# took 1.2-1.3 s instead of 1.7-1.8 s (smaller graphs, and two iterations, were not measured).
# Without the server, from COLD_PROCESS_EDGES: its start (1.3 s of a core) then falls in the
# stage, and at 428k edges costs about what the process saves.
FRESH_PROCESS_EDGES = 100_000
COLD_PROCESS_EDGES = 1_000_000
# the settings a fresh clustering of the same graph depends on: the state (and the communities it
# describes) were made with them, so an update under others clusters in full
PARTITION_SETTINGS = ("engine", "max_cluster_size", "resolution", "seed", "n_iterations", "max_levels")


def settings_id(config) -> str:
    """A hash of the cluster settings that decide the partition (PARTITION_SETTINGS)."""
    return ids.stable_id("cluster-settings", json.dumps({k: getattr(config, k) for k in PARTITION_SETTINGS}, sort_keys=True))


def current_graph(store) -> tuple[list[str], np.ndarray, np.ndarray, pa.Table]:
    entities = store.read("entities", columns=["entity_id"])
    relationships = store.read("relationships", columns=["relationship_id", "source_id", "target_id", "weight"])
    entity_ids = sorted(entities.column("entity_id").to_pylist())
    edges = np.column_stack([entity_positions(relationships.column(c), entity_ids) for c in ("source_id", "target_id")])
    weights = to_numpy(relationships.column("weight"), np.float64)
    return entity_ids, edges.reshape(-1, 2), weights, relationships


def entities_rewritten(store, since: int | None, entity_ids: list[str]) -> np.ndarray | None:
    """Per entity (sorted ids), whether its row was written since entities version `since` (so
    its chunk list may have changed: a community holding it counts its chunks again), read from
    the key columns of the files the Delta log added since; None when the log cannot say."""
    changes = changes_since(store, "entities", since, "entity_id", ["entity_id"])
    if changes is None:
        return None
    out = np.zeros(len(entity_ids), dtype=bool)
    at = pc.index_in(changes.rows.column("entity_id"), value_set=pa.array(entity_ids, pa.string()))
    out[to_numpy(at.drop_null(), np.int64)] = True
    return out


def save_state(store, entity_ids, edges, weights, total: int, config) -> None:
    store.files.write_arrays(f"{STATE}/graph.npz", edges=edges.astype(np.int32), weights=weights)
    store.files.write_table(f"{STATE}/entities.arrow", pa.table({"entity_id": pa.array(entity_ids, pa.string())}))
    note = {"communities": store.version("communities"), "entities": store.version("entities"), "total": str(total),
            "settings": settings_id(config)}
    store.files.write_bytes(f"{STATE}/state.json", json.dumps(note).encode())


def settings_changed(store, config) -> bool:
    """Whether the communities were made under other partition settings than `config`'s, as the
    state records them (False where no state says: one from before they were recorded is taken
    as made under these, since clustering again would rewrite every report)."""
    try:
        note = json.loads(store.files.read_bytes(f"{STATE}/state.json"))
    except Exception:  # noqa: BLE001 - no state: nothing known
        return False
    return _made_under_others(note, config)


def _made_under_others(note: dict, config) -> bool:
    return note.get("settings", settings_id(config)) != settings_id(config)


def load_state(store, config) -> dict | None:
    try:
        note = json.loads(store.files.read_bytes(f"{STATE}/state.json"))
        if note["communities"] != store.version("communities"):
            return None  # the communities were written by something else since
        if _made_under_others(note, config):
            return None  # a fresh clustering under these settings differs
        arrays = store.files.read_arrays(f"{STATE}/graph.npz")
        arrays["entity_ids"] = store.files.read_table(f"{STATE}/entities.arrow").column("entity_id").combine_chunks()
        arrays["total"] = int(note["total"])
        arrays["entities_version"] = note.get("entities")  # absent from a state written before it was kept
        return arrays
    except Exception:  # noqa: BLE001 - no state, or an older one: cluster in full
        return None


def rewrite_layout(store, entity_ids: list[str]) -> dict:
    """Write the communities table whole in its contract's layout (a table written with columns
    the contract dropped: the chunk lists), the same communities with the columns computed now.
    No membership changes, so no report is written again; the update path's state stays valid
    (it is restamped with the new version). Members that are no longer entities are left out of
    the counts: the update that follows rebuilds their communities."""
    try:
        note = json.loads(store.files.read_bytes(f"{STATE}/state.json"))
    except Exception:  # noqa: BLE001 - no state: the caller clusters in full
        note = None
    valid = note is not None and note.get("communities") == store.version("communities")
    columns = [c for c in contracts.schema("communities").arrow.names if c != "n_chunks"]
    table = store.read("communities", columns=columns).sort_by([("level", "ascending"), ("community_id", "ascending")])
    chunks = ChunkLists.of_store(store, entity_ids)

    def parts():  # previous_levels lists the rows in this order, members as entity positions
        start = 0
        for level in previous_levels(table, entity_ids):
            label = np.full(len(entity_ids), -1, dtype=np.int64)
            for k, (members, _, _) in enumerate(level):
                label[members] = k
            yield table.slice(start, len(level)).append_column("n_chunks", pa.array(chunks.counts(label, len(level)), pa.int64()))
            start += len(level)

    diff = store.replace_parts_if_changed("communities", parts())
    if valid:
        store.files.write_bytes(f"{STATE}/state.json", json.dumps({**note, "communities": store.version("communities")}).encode())
    return diff


def cluster_update(store, config, engine, workers: int, usage: dict, graph=None) -> dict | None:
    """Re-cluster where the graph changed and patch the communities table; None when there is no
    usable state (the caller clusters in full)."""
    old = load_state(store, config)
    if old is None:
        return None
    entity_ids, edges, weights, relationships = graph or current_graph(store)
    n = len(entity_ids)
    touched, changed_new, changed_old, new_nodes = graph_changes(
        old["entity_ids"], old["edges"].astype(np.int64), old["weights"], entity_ids, edges, weights)
    wanted = config.refresh_gain is not None and bool(touched.any())
    with _beside(engine, len(edges), wanted) as side:
        fresh = _fresh_top_of(side, n, edges, weights, config, engine) if wanted else None
        return _update(store, config, engine, workers, usage, old, entity_ids, edges, weights, relationships,
                       touched, changed_new, changed_old, fresh)


def prepare(store, config, engine) -> None:
    """When the run starts (the stage's `prepare`): start what _beside's process forks from, if
    it will be wanted (starting it costs about 1.3 s of a core, which ingest and extract leave
    idle). The relationships are counted as the last run left them: a first build starts none."""
    if (config.refresh_gain is not None and getattr(engine, "holds_gil", False)
            and sum(n for _, n in data_files(store, "relationships")) >= FRESH_PROCESS_EDGES):
        start_forkserver()


def _beside(engine, edges: int, wanted: bool):
    """Where the quality check's fresh top level (two iterations of a cold Leiden: 2.5 s of CPU
    at 1.2M chunks) runs while the update reads the previous hierarchy and re-partitions what
    changed. An engine that holds the GIL (igraph) in a thread would stall the driver, and its
    partitions queue behind one lock: it gets a process of its own, forked from the server
    `prepare` started with the run from FRESH_PROCESS_EDGES up, and from COLD_PROCESS_EDGES up
    without it."""
    least = FRESH_PROCESS_EDGES if forkserver_started() else COLD_PROCESS_EDGES
    if wanted and getattr(engine, "holds_gil", False) and edges >= least:
        try:
            return _start_pool(1)
        except (OSError, ValueError):  # no processes here: a thread, as below
            pass
    return ThreadPoolExecutor(1, thread_name_prefix="fresh-top")


def _fresh_top_of(side, n, edges, weights, config, engine):
    """A function giving fresh_top's labels, started on `side` now; computed on the driver should
    its process fail to start or die."""
    try:
        future = side.submit(fresh_top, n, edges, weights, config, engine)
    except (OSError, RuntimeError, BrokenProcessPool):
        future = None

    def result():
        if future is not None:
            try:
                return future.result()
            except BrokenProcessPool:
                pass
        return fresh_top(n, edges, weights, config, engine)
    return result


def _update(store, config, engine, workers, usage, old, entity_ids, edges, weights, relationships,
            touched, changed_new, changed_old, fresh) -> dict:
    laps = Laps()
    n = len(entity_ids)
    old_at = to_numpy(pc.fill_null(pc.index_in(pa.array(entity_ids, pa.string()), value_set=old["entity_ids"]), -1), np.int64)
    rewritten = entities_rewritten(store, old["entities_version"], entity_ids)
    # an entity whose row was written again may hold other chunks (without the log: any may)
    chunks_changed = (old_at < 0) | (rewritten if rewritten is not None else np.ones(n, dtype=bool))
    node_hash = stable_hashes(entity_ids)
    total = graph_sum(node_hash, edges, weights)
    previous = store.read("communities", columns=["community_id", "human_id", "level", "parent_id", "children_ids", "entity_ids"])
    prev = previous_levels(previous, entity_ids)
    # an edge that changed inside a community changes its relationship list; a member's chunks, its chunk list
    changed = np.zeros(n, dtype=bool)
    changed[edges[changed_new].reshape(-1)] = True
    changed |= touched | chunks_changed

    hashed = graph_digest(total)
    laps.lap("changes_s")

    def table_rows(levels: list) -> dict:  # made again should the fresh top level win: the digest once
        return _table_rows(store, levels, previous, entity_ids, edges, relationships, changed, hashed)

    with _pool(workers, len(edges), lazy=True) as pool:
        if fresh is None:
            levels, stats = incremental_levels(n, edges, weights, config, engine, prev, touched, node_hash, pool, usage)
            rows = table_rows(levels)
        else:  # the fresh top level is on its way: the units' levels and their rows are made while it is
            levels, stats, rows = checked_levels(n, edges, weights, config, engine, prev, touched, node_hash, pool, usage,
                                                 fresh, meanwhile=table_rows)
    laps.lap("levels_and_rows_s")  # the re-partitioned units, the quality check and the rows, side by side
    diff = patch_table(store, "communities", rows["removed"], rows["parts"])
    laps.lap("write_s")
    save_state(store, entity_ids, edges, weights, total, config)
    laps.lap("save_state_s")
    return {**diff, **stats, "rebuilt": rows["rebuilt"], "kept": rows["communities"] - rows["rebuilt"],
            "touched_entities": int(touched.sum()), "changed_edges": int(len(changed_new) + len(changed_old)),
            "communities": rows["communities"], "seconds": laps.seconds}


def _table_rows(store, levels: list, previous: pa.Table, entity_ids, edges, relationships, changed: np.ndarray,
                hashed: str) -> dict:
    """The communities table's new rows for `levels` (as tables, made now), the ids of the rows
    they remove, and counts. `changed` marks the entities whose edges or chunks changed: a
    community holding one, or whose place in the hierarchy moved, is written again."""
    communities = listing(levels)
    members = [[entity_ids[i] for i in c.members] for c in communities]
    cids = [ids.community_id(c.level, m) for c, m in zip(communities, members)]
    before = {cid: (h, p, tuple(ch)) for cid, h, p, ch in zip(*(previous.column(c).to_pylist() for c in
                                                               ("community_id", "human_id", "parent_id", "children_ids")))}
    parent = [None if c.parent is None else cids[c.parent] for c in communities]
    children = [tuple(cids[k] for k in c.children) for c in communities]
    rebuild = [cid not in before or before[cid][1] != parent[i] or before[cid][2] != children[i] or bool(changed[c.members].any())
               for i, (cid, c) in enumerate(zip(cids, communities))]
    next_human = max((h for h, _, _ in before.values()), default=-1) + 1
    human = []
    for cid in cids:
        if cid in before:
            human.append(before[cid][0])
        else:
            human.append(next_human)
            next_human += 1
    chosen = [i for i, r in enumerate(rebuild) if r]
    parts = list(_rows(store, chosen, communities, cids, human, parent, children, members, entity_ids, edges, relationships, hashed))
    removed = pa.array(sorted(set(before) - set(cids)), pa.string())
    return {"parts": parts, "removed": removed, "rebuilt": len(chosen), "communities": len(communities)}


def _rows(store, chosen, communities, cids, human, parent, children, members, entity_ids, edges, relationships, hashed):
    """The communities table's rows of `chosen` (indices into `communities`), a level at a time."""
    if not chosen:
        return
    wanted = sorted({e for i in chosen for e in members[i]})
    chunk_lists = ChunkLists.of_store(store, entity_ids, _entity_batches(store, wanted))
    by_level: dict[int, list[int]] = {}
    for i in chosen:
        by_level.setdefault(communities[i].level, []).append(i)

    def level_rows(level: int, at: list[int]) -> pa.Table:
        label = np.full(len(entity_ids), -1, dtype=np.int64)
        for k, i in enumerate(at):
            label[communities[i].members] = k
        a, b = label[edges[:, 0]], label[edges[:, 1]]
        inside = np.flatnonzero((a == b) & (a >= 0))
        rel_codes, rel_names = sorted_codes(relationships.column("relationship_id").take(pa.array(inside)))
        return pa.table({
            "community_id": pa.array([cids[i] for i in at], pa.string()),
            "human_id": pa.array([human[i] for i in at], pa.int64()),
            "level": pa.array([level] * len(at), pa.int64()),
            "parent_id": pa.array([parent[i] for i in at], pa.string()),
            "children_ids": pa.array([list(children[i]) for i in at], pa.list_(pa.string())),
            "entity_ids": pa.array([members[i] for i in at], pa.list_(pa.string())),
            "relationship_ids": distinct_lists(a[inside], rel_codes, rel_names, len(at)),
            "n_chunks": pa.array(chunk_lists.counts(label, len(at)), pa.int64()),
            "size": pa.array([len(members[i]) for i in at], pa.int64()),
            "graph_hash": pa.array([hashed] * len(at), pa.string()),
        }).cast(contracts.schema("communities").arrow)

    # two levels at a time: their sorts (chunk and relationship codes) run in numpy and Arrow
    # without the GIL; the rows of 4,501 communities took 8.2 s in one thread at 1.2M chunks
    with ThreadPoolExecutor(2, thread_name_prefix="community-rows") as pool:
        yield from pool.map(level_rows, *zip(*sorted(by_level.items())))


def _entity_batches(store, wanted: list[str]):
    """(entity_id, chunk_ids) batches of the `wanted` entities only."""
    value_set = pa.array(wanted, pa.string())
    for batch in store.scanner("entities")(["entity_id", "chunk_ids"]):
        keep = pc.is_in(batch.column("entity_id"), value_set=value_set)
        if pc.any(keep).as_py():
            yield batch.filter(keep)
