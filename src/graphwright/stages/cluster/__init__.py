"""Cluster stage (fan-in, on the driver): hierarchical Leiden over entities and relationships,
warm-started from the previous communities; skipped when the graph hash is unchanged. Large
levels are split in a pool of execution.driver_processes processes."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from graphwright.pipeline.stage import Stage, Where
from graphwright.engines.graph import make_engine
from graphwright.stages.cluster.communities import ChunkLists, cluster_parts
from graphwright.stages.cluster.incremental import graph_digest, graph_sum
from graphwright.stages.cluster.update import cluster_update, current_graph, prepare, rewrite_layout, save_state, settings_changed
from graphwright.stages.resolve.pair_cache import stable_hashes
from graphwright.storage.memo import StageMemo
from graphwright.storage.patch import retired_columns
from graphwright.util.cores import driver_cores


def execute(run, m: dict) -> dict:
    store = run.store
    memo = StageMemo(store, "cluster", ("entities", "relationships", "chunks"), ("communities",),
                     run.config.cluster.model_dump_json())
    if (last := memo.unchanged()) is not None:  # the graph was not written since it was clustered
        per_level = {int(k): v for k, v in last.get("per_level", {}).items()}
        m.update(rows_in=0, rows_out=0, engine=run.config.cluster.engine, per_level=per_level, skipped=True,
                 work_unit="graph", work_done=0, work_total=1)
        return {"per_level": per_level, "changes": {"added": 0, "removed": 0, "changed": 0, "unchanged": sum(per_level.values())}}
    result = _cluster(run, m)
    memo.record({"per_level": result["per_level"]})
    return result


def _cluster(run, m: dict) -> dict:
    store, cfg = run.store, run.config.cluster
    usage = {"worker_cpu_s": 0.0}
    workers = driver_cores(run.config.execution)
    engine = make_engine(cfg.engine)
    incremental = _incremental(cfg, engine)
    graph = current_graph(store)
    entity_ids, edges, weights, relationships = graph
    retired = retired_columns(store, "communities")  # an older layout (chunk lists): written whole once, then patched
    if retired:
        rewrite_layout(store, entity_ids)
    diff = cluster_update(store, cfg, engine, workers, usage, graph) if incremental else None
    if diff is None:  # no state to start from: the whole hierarchy, warm-started from the table
        total = graph_sum(stable_hashes(entity_ids), edges, weights)
        previous = store.read("communities", columns=["level", "entity_ids", "graph_hash"])  # for the warm start
        hashed = graph_digest(total)
        if settings_changed(store, cfg):  # the graph hash does not say which settings clustered it
            previous = previous.slice(0, 0)  # nor is a partition made under others a start for these
        # every row: an update rewrites only the communities it changed, which alone get its hash
        if previous.num_rows and pc.all(pc.equal(previous.column("graph_hash"), hashed)).as_py():
            diff = {"added": 0, "removed": 0, "changed": 0, "unchanged": previous.num_rows}
        else:
            entities = pa.table({"entity_id": pa.array(entity_ids, pa.string())})
            chunks = ChunkLists.of_store(store, entity_ids)
            parts = cluster_parts(entities, relationships, cfg, engine=engine, previous=previous, workers=workers,
                                  usage=usage, hashed=hashed, chunks=chunks)
            diff = store.replace_parts_if_changed("communities", parts)
        save_state(store, entity_ids, edges, weights, total, cfg)
    m.update(usage)
    if diff.get("seconds"):  # the update path's steps
        m["seconds"] = diff.pop("seconds")
    per_level = _per_level(store.read("communities", columns=["level"]))
    m.update(rows_in=len(entity_ids), rows_out=sum(per_level.values()), engine=cfg.engine, incremental=incremental and "rebuilt" in diff,
             per_level=per_level, changes=diff, work_unit="graph", work_done=1, work_total=1,
             **({"columns_retired": retired} if retired else {}))
    return {"per_level": per_level, "changes": diff}


def _incremental(cfg, engine) -> bool:
    return cfg.warm_start and getattr(engine, "name", "") == "igraph"  # it partitions by a larger graph's modularity


def _prepare(run) -> None:
    cfg = run.config.cluster
    engine = make_engine(cfg.engine)
    if _incremental(cfg, engine):
        prepare(run.store, cfg, engine)


def _per_level(communities: pa.Table) -> dict[int, int]:
    levels = pc.value_counts(communities.column("level")).to_pylist() if communities.num_rows else []
    return {int(v["values"]): int(v["counts"]) for v in sorted(levels, key=lambda v: v["values"])}


STAGE = Stage(
    "cluster", reads=("entities", "relationships", "communities", "chunks"), writes=("communities",), execute=execute,
    where=lambda cfg: Where(f"{cfg.cluster.engine} hierarchical Leiden, max cluster {cfg.cluster.max_cluster_size}"),
    gpus=lambda cfg: 1 if cfg.cluster.engine == "cugraph" else 0,
    summary="hierarchical Leiden, warm-started; community ids from level and members",
    engines=("graph: igraph | leidenalg | cugraph",), prepare=_prepare,
)
