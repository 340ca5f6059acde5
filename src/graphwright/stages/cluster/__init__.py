"""Cluster stage (fan-in, on the driver): hierarchical Leiden over entities and relationships,
warm-started from the previous communities; skipped when the graph hash is unchanged. Large
levels are split in a pool of execution.driver_processes processes."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc

from graphwright.pipeline.stage import Stage, Where
from graphwright.stages.cluster.communities import ChunkLists, cluster_parts, graph_hash


def execute(run, m: dict) -> dict:
    store = run.store
    entities = store.read("entities", columns=["entity_id"])
    relationships = store.read("relationships", columns=["relationship_id", "source_id", "target_id", "weight"])
    previous = store.read("communities", columns=["level", "entity_ids", "graph_hash"])  # for the warm start
    hashed = graph_hash(entities, relationships)
    unchanged = previous.num_rows and previous.column("graph_hash")[0].as_py() == hashed
    if unchanged:  # same graph: keep the communities (a warm-started Leiden could still move nodes)
        diff = {"added": 0, "removed": 0, "changed": 0, "unchanged": previous.num_rows}
    else:
        usage = {"worker_cpu_s": 0.0}
        chunks = ChunkLists.scan(store.scanner("entities")(["entity_id", "chunk_ids"]),
                                 sorted(entities.column("entity_id").to_pylist()),
                                 store.read("chunks", columns=["chunk_id"]).column("chunk_id"))
        parts = cluster_parts(entities, relationships, run.config.cluster, previous=previous,
                              workers=run.config.execution.driver_processes or os.cpu_count() or 1,
                              usage=usage, hashed=hashed, chunks=chunks)
        diff = store.replace_parts_if_changed("communities", parts)
        m.update(usage)
    per_level = _per_level(store.read("communities", columns=["level"]))
    m.update(rows_in=entities.num_rows, rows_out=sum(per_level.values()), engine=run.config.cluster.engine,
             per_level=per_level, changes=diff, work_unit="graph", work_done=0 if unchanged else 1, work_total=1)
    return {"per_level": per_level, "changes": diff}


def _per_level(communities: pa.Table) -> dict[int, int]:
    levels = pc.value_counts(communities.column("level")).to_pylist() if communities.num_rows else []
    return {int(v["values"]): int(v["counts"]) for v in sorted(levels, key=lambda v: v["values"])}


STAGE = Stage(
    "cluster", reads=("entities", "relationships", "communities", "chunks"), writes=("communities",), execute=execute,
    where=lambda cfg: Where(f"{cfg.cluster.engine} hierarchical Leiden, max cluster {cfg.cluster.max_cluster_size}"),
    gpus=lambda cfg: 1 if cfg.cluster.engine == "cugraph" else 0,
    summary="hierarchical Leiden, warm-started; community ids from level and members",
    engines=("graph: igraph | leidenalg | cugraph",),
)
