"""Publish stage: one `index_manifest` row pins the Delta version of every data table and the
vector index files, unless the latest one already pins exactly this state (a no-op rerun
publishes nothing). Queries read a version's tables at their pinned versions."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa

from graphwright.config import PipelineConfig
from graphwright.engines.embed import model_name
from graphwright.pipeline.stage import Stage, Where
from graphwright.storage.checkpoints import checkpoint_due
from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import DATA_TABLES, manifests
from graphwright.storage.patch import data_files


def publish(store: IndexStore, run_id: str, config: PipelineConfig, vector_indexes: dict[str, str],
            written: dict[str, str] | None = None) -> dict:
    """Write a new manifest unless the latest one already pins exactly this state. `written`:
    the sha256 of vector files written by this run; the others' come from earlier manifests, or
    are computed once (files published before digests were recorded)."""
    versions = {}
    for name in DATA_TABLES:  # a table no stage made yet is made empty, so that the manifest pins every table
        version = store.version(name)
        versions[name] = version if version is not None else store.ensure(name).version()
    counts = {name: _rows(store, name) for name in DATA_TABLES}
    previous = manifests(store)
    latest = previous[-1] if previous else None
    digests = vector_digests(store, vector_indexes, previous, written or {})
    if latest and latest["table_versions"] == versions and latest["vector_indexes"] == vector_indexes \
            and latest["config_hash"] == config.config_hash() and latest.get("vector_files") in (None, digests):
        return {**latest, "new": False}
    row = {
        "version": (latest["version"] + 1) if latest else 1,
        "published_at": datetime.now(timezone.utc),
        "run_id": run_id,
        "table_versions": json.dumps(versions, sort_keys=True),
        "vector_indexes": json.dumps(vector_indexes, sort_keys=True),
        "vector_files": json.dumps(digests, sort_keys=True),
        "config_hash": config.config_hash(),
        "config": config.model_dump_json(),
        "embedding_model": model_name(config.embed),
        "counts": json.dumps(counts, sort_keys=True),
    }
    store.upsert("index_manifest", pa.Table.from_pylist([row]))
    return {**row, "table_versions": versions, "vector_indexes": vector_indexes, "vector_files": digests, "counts": counts,
            "new": True}


def vector_digests(store: IndexStore, vector_indexes: dict[str, str], previous: list[dict], written: dict[str, str]) -> dict[str, str]:
    """sha256 of every file of `vector_indexes` (each vector index and its ids file, each search file)."""
    from graphwright.stages.embed.pinned_files import files_of, is_search_file
    from graphwright.storage.health import file_digest

    # a file keeps the digest an earlier version recorded: vector files are rewritten only by
    # their stage (which reports what it wrote), segments and arrays never; a search index's
    # version file and item list are small and rewritten in place when it is rebuilt, so hashed
    known = {f: d for m in previous for f, d in (m.get("vector_files") or {}).items()
             if not (is_search_file(f) and f.endswith((".json", ".ids.arrow", ".ids.parquet")))}
    known.update(written)
    paths = [p for relative in vector_indexes.values() for p in files_of(store.files, relative)]
    return {p: known[p] if p in known else file_digest(store.files, p) for p in sorted(paths)}


def _rows(store: IndexStore, name: str) -> int:
    """A table's rows from the record counts its Delta log keeps per file (no data file read)."""
    files = data_files(store, name)
    if any(n is None for _, n in files):
        return store.count(name)
    return sum(n for _, n in files)


def execute(run, m: dict) -> dict:
    vector_indexes = run.results["embed"]["vector_indexes"]
    manifest = publish(run.store, run.run_id, run.config, vector_indexes, run.results["embed"].get("vector_files"))
    m.update(rows_in=len(manifest["table_versions"]), rows_out=1 if manifest["new"] else 0, version=manifest["version"],
             new_version=manifest["new"], work_unit="versions", work_done=1, work_total=1,
             checkpoints=checkpoint_due(run.store))  # so that the next run's table opens replay few commits
    return manifest


STAGE = Stage(
    "publish", reads=DATA_TABLES + ("vectors/",), writes=("index_manifest",), execute=execute,
    where=lambda cfg: Where(f"manifest + {cfg.vectors.engine} indexes"),
    summary="a new manifest version pinning every table's Delta version and the vector files; Delta checkpoints where due",
)
