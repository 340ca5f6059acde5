"""Cluster: the communities table from a hierarchy (plain functions). Community ids derive from
level and members; each row lists its entities and the relationships inside it, and counts the
chunks its entities are mentioned in (the lists themselves stay on the entity rows: as lists here
they were nine tenths of the table's bytes, rewritten by every update that touched a member). The
previous table gives the warm start."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.config import ClusterConfig
from graphwright.engines.graph import make_engine
from graphwright.stages.cluster.hierarchy import hierarchical_leiden
from graphwright.storage import contracts
from graphwright.util.numeric import distinct_counts_by_code, distinct_lists, grouped_order, in_runs, sorted_codes, to_numpy


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
    rels = relationships.select(["relationship_id", "weight"])
    rels = rels.take(pc.sort_indices(rels, [("relationship_id", "ascending")]))  # ids are distinct

    def parts():
        yield from sorted(entities.column("entity_id").to_pylist())
        for batch in rels.to_batches(max_chunksize=65_536):
            yield from (f"{r}:{w!r}" for r, w in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()))

    return ids.stable_id_of("graph", parts(), length=32)


def cluster(entities: pa.Table, relationships: pa.Table, config: ClusterConfig, engine=None,
            previous: pa.Table | None = None, workers: int = 1, usage: dict | None = None,
            hashed: str | None = None) -> pa.Table:
    """The communities table for the current entities and relationships (warm-started from
    `previous` communities when given and `config.warm_start` is set; large levels split in
    `workers` processes, whose CPU seconds go to usage["worker_cpu_s"]). `hashed`: their
    graph_hash, when the caller has it already."""
    parts = list(cluster_parts(entities, relationships, config, engine, previous, workers, usage, hashed))
    if not parts:
        return contracts.empty("communities")
    table = pa.concat_tables(parts)
    return table.take(pc.sort_indices(table.column("human_id")))


@dataclass
class ChunkLists:
    """The chunks each entity is mentioned in, as codes (the lists as strings are 2.3 GB at 1.2M
    chunks): per list item, in order of chunk code, the entity's position among the sorted entity
    ids and the chunk's code; `names`, the chunk ids by code. Only distinct codes are counted, so the codes need
    not sort as the ids do (sorting the 1.2M ids took 0.6 s of every update)."""

    owner: np.ndarray
    codes: np.ndarray
    names: pa.Array

    def __post_init__(self) -> None:
        order = grouped_order(self.codes)  # in order of chunk, as every level's count reads them (a counting pass)
        self.owner, self.codes = self.owner[order], self.codes[order]

    @classmethod
    def of(cls, entities: pa.Table, entity_ids: list[str]) -> ChunkLists:
        """From an entities table with its chunk_ids column."""
        table = entities.select(["entity_id", "chunk_ids"])
        return cls.scan(iter(table.to_batches()), entity_ids, pc.unique(pc.list_flatten(table.column("chunk_ids"))))

    @classmethod
    def scan(cls, batches: Iterator[pa.RecordBatch], entity_ids: list[str], chunk_ids: pa.Array) -> ChunkLists:
        """From (entity_id, chunk_ids) record batches, coded against `chunk_ids` (every chunk an
        entity can list, each once: the chunks table's ids), so that the lists are never whole as
        strings."""
        names = chunk_ids.combine_chunks() if isinstance(chunk_ids, pa.ChunkedArray) else chunk_ids
        owners, codes = [np.empty(0, np.int32)], [np.empty(0, np.int32)]
        for run in in_runs(batches, lambda b: len(pc.list_flatten(b.column("chunk_ids")))):
            items = pa.chunked_array([pc.list_flatten(b.column("chunk_ids")) for b in run], names.type)
            found = pc.index_in(items, value_set=names)  # one lookup a run: each hashes the 1.2M names
            if found.null_count:
                raise KeyError(f"chunk {items.filter(pc.is_null(found))[0]} of an entity is not in the chunks table")
            for batch in run:
                lists = batch.column("chunk_ids")
                owners.append(entity_positions(batch.column("entity_id"), entity_ids)[to_numpy(pc.list_parent_indices(lists), np.int64)].astype(np.int32))
            codes.append(to_numpy(found, np.int32))
        return cls(np.concatenate(owners), np.concatenate(codes), names)

    @classmethod
    def coded(cls, lineage, entity_ids: list[str]) -> ChunkLists:
        """From resolve's codes of the lists (storage.lineage), which need no lookup."""
        owner, codes = lineage.entity_items()
        ours = pa.array(entity_ids, pa.string())
        if not ours.equals(lineage.entity_ids):  # the same ids, sorted alike, in any index resolve wrote
            owner = entity_positions(lineage.entity_ids, entity_ids)[owner].astype(np.int32)
        return cls(owner, codes, lineage.chunk_ids)

    @classmethod
    def of_store(cls, store, entity_ids: list[str], batches: Iterator[pa.RecordBatch] | None = None) -> ChunkLists:
        """The entities' lists from resolve's codes where they are of the tables now, else scanned
        from `batches` (all the entities' by default)."""
        from graphwright.storage import lineage

        coded = lineage.current(store)
        if coded is not None:
            return cls.coded(coded, entity_ids)
        return cls.scan(batches if batches is not None else store.scanner("entities")(["entity_id", "chunk_ids"]), entity_ids,
                        store.read("chunks", columns=["chunk_id"]).column("chunk_id"))

    def counts(self, label: np.ndarray, n_groups: int) -> np.ndarray:
        """Per group 0..n_groups-1 of entities (`label` per entity position, -1 for none), the
        distinct chunks its entities are mentioned in (the items are in order of chunk:
        distinct_counts_by_code)."""
        return distinct_counts_by_code(label[self.owner], self.codes, n_groups)


def cluster_parts(entities: pa.Table, relationships: pa.Table, config: ClusterConfig, engine=None,
                  previous: pa.Table | None = None, workers: int = 1, usage: dict | None = None,
                  hashed: str | None = None, chunks: ChunkLists | None = None) -> Iterator[pa.Table]:
    """cluster()'s rows a level at a time. `chunks`: the entities' chunk lists as codes, when
    `entities` has no chunk_ids column."""
    engine = engine or make_engine(config.engine)
    entity_ids = sorted(entities.column("entity_id").to_pylist())
    src, tgt = (entity_positions(relationships.column(name), entity_ids) for name in ("source_id", "target_id"))
    edges = np.column_stack([src, tgt])
    weights = np.asarray(relationships.column("weight").to_pylist(), dtype=np.float64)

    initial = None
    if config.warm_start and previous is not None and previous.num_rows:
        initial = previous_membership(entity_ids, previous)
    communities = hierarchical_leiden(len(entity_ids), edges, weights, config, engine, initial, workers, usage)
    hashed = hashed or graph_hash(entities, relationships)

    # relationship ids as codes in sorted order, so that each community's sorted distinct ids come
    # from one numpy pass per level (Arrow holds the strings, not Python); chunks are counted by code
    rel_codes, rel_names = sorted_codes(relationships.column("relationship_id"))
    chunks = chunks or ChunkLists.of(entities, entity_ids)
    src_a, tgt_a = np.asarray(src, dtype=np.int64), np.asarray(tgt, dtype=np.int64)

    members = [[entity_ids[i] for i in c.members] for c in communities]  # sorted: members and entity_ids are
    cids = [ids.community_id(c.level, m) for c, m in zip(communities, members)]
    for level in sorted({c.level for c in communities}):
        at_level = [i for i, c in enumerate(communities) if c.level == level]
        label = np.full(len(entity_ids), -1, dtype=np.int64)
        for k, i in enumerate(at_level):
            label[communities[i].members] = k
        a, b = label[src_a], label[tgt_a]
        yield pa.table({
            "community_id": pa.array([cids[i] for i in at_level], pa.string()),
            "human_id": pa.array(at_level, pa.int64()),
            "level": pa.array([level] * len(at_level), pa.int64()),
            "parent_id": pa.array([None if communities[i].parent is None else cids[communities[i].parent] for i in at_level], pa.string()),
            "children_ids": pa.array([[cids[k] for k in communities[i].children] for i in at_level], pa.list_(pa.string())),
            "entity_ids": pa.array([members[i] for i in at_level], pa.list_(pa.string())),
            "relationship_ids": distinct_lists(np.where(a == b, a, -1), rel_codes, rel_names, len(at_level)),
            "n_chunks": pa.array(chunks.counts(label, len(at_level)), pa.int64()),
            "size": pa.array([len(members[i]) for i in at_level], pa.int64()),
            "graph_hash": pa.array([hashed] * len(at_level), pa.string()),
        }).cast(contracts.schema("communities").arrow)


def entity_positions(names: pa.ChunkedArray, entity_ids: list[str]) -> np.ndarray:
    """Index of each name in the sorted entity ids (a relationship to an unknown entity is an error)."""
    found = pc.index_in(names, value_set=pa.array(entity_ids, type=names.type))
    if found.null_count:
        raise KeyError(f"{names.filter(pc.is_null(found))[0]} is not in the entities table")
    return to_numpy(found, np.int64)
