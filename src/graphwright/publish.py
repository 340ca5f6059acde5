"""Publish: one `index_manifest` row pins the Delta version of every data table and the vector
index files. Readers open a manifest version and read each table at its pinned version, so a
published version never changes under them; rollback republishes an older manifest's pins."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa

from graphwright.config import PipelineConfig
from graphwright.embed import model_name
from graphwright.store import IndexStore
from graphwright.vectors import ids_path

DATA_TABLES = (
    "documents", "chunks", "extractions", "mentions", "assertions", "entities", "entity_aliases",
    "relationships", "communities", "community_reports", "embeddings",
)


class NoPublishedVersion(LookupError):
    pass


def manifests(store: IndexStore) -> list[dict]:
    rows = store.read("index_manifest").to_pylist()
    for row in rows:
        for key in ("table_versions", "vector_indexes", "counts"):
            row[key] = json.loads(row[key])
    return sorted(rows, key=lambda r: r["version"])


def load_manifest(store: IndexStore, version: int | None = None) -> dict:
    rows = manifests(store)
    if not rows:
        raise NoPublishedVersion(f"{store.root}: no published index version (run `graphwright index` first)")
    if version is None:
        return rows[-1]
    for row in rows:
        if row["version"] == version:
            return row
    raise NoPublishedVersion(f"{store.root}: no version {version}; published: {[r['version'] for r in rows]}")


def version_rows(store: IndexStore) -> list[dict]:
    """Published versions, each with the command whose run published it (what `graphwright
    versions --json` prints and the HTTP API returns)."""
    runs = store.read("runs", columns=["run_id", "command"])
    commands = dict(zip(runs.column("run_id").to_pylist(), runs.column("command").to_pylist()))
    return [
        {"version": m["version"], "published_at": str(m["published_at"]), "run_id": m["run_id"],
         "command": commands.get(m["run_id"], "rollback"), "counts": m["counts"]}
        for m in manifests(store)
    ]


def publish(store: IndexStore, run_id: str, config: PipelineConfig, vector_indexes: dict[str, str]) -> dict:
    """Write a new manifest unless the latest one already pins exactly this state."""
    versions = {name: store.ensure(name).version() for name in DATA_TABLES}
    counts = {name: store.count(name) for name in DATA_TABLES}
    previous = manifests(store)
    latest = previous[-1] if previous else None
    if latest and latest["table_versions"] == versions and latest["vector_indexes"] == vector_indexes \
            and latest["config_hash"] == config.config_hash():
        return {**latest, "new": False}
    row = {
        "version": (latest["version"] + 1) if latest else 1,
        "published_at": datetime.now(timezone.utc),
        "run_id": run_id,
        "table_versions": json.dumps(versions, sort_keys=True),
        "vector_indexes": json.dumps(vector_indexes, sort_keys=True),
        "config_hash": config.config_hash(),
        "config": config.model_dump_json(),
        "embedding_model": model_name(config.embed),
        "counts": json.dumps(counts, sort_keys=True),
    }
    store.upsert("index_manifest", pa.Table.from_pylist([row]))
    return {**row, "table_versions": versions, "vector_indexes": vector_indexes, "counts": counts, "new": True}


class PublishedIndex:
    """Read access to one published version."""

    def __init__(self, store: IndexStore, version: int | None = None):
        self.store = store
        self.manifest = load_manifest(store, version)
        self.version = self.manifest["version"]

    @property
    def config(self) -> PipelineConfig:
        return PipelineConfig.model_validate_json(self.manifest["config"])

    def read(self, name: str, **kwargs) -> pa.Table:
        return self.store.read(name, version=self.manifest["table_versions"][name], **kwargs)

    def vector_index(self, kind: str):
        from graphwright.vectors import load_from

        return load_from(self.store.files, self.manifest["vector_indexes"][kind])


def rollback(store: IndexStore, to_version: int, run_id: str) -> dict:
    """Make version `to_version` current again: restore every data table to the Delta version it
    pins (new Delta commits, so later runs build on the restored state) and publish that as a
    new version. Nothing is copied and no history is lost."""
    target = load_manifest(store, to_version)
    for name in DATA_TABLES:
        pinned = target["table_versions"].get(name)
        dt = store.ensure(name)
        if pinned is not None and dt.version() != pinned:
            dt.restore(pinned)
    config = PipelineConfig.model_validate_json(target["config"])
    return publish(store, run_id, config, target["vector_indexes"])


def retain(store: IndexStore, keep: int, *, dry_run: bool = False) -> dict:
    """Keep the newest `keep` published versions readable; drop older manifests, the Delta files
    only they needed, and vector index files no kept version uses."""
    rows = manifests(store)
    if keep < 1:
        raise ValueError("keep at least one version")
    kept, dropped = rows[-keep:], rows[:-keep]
    if not dropped:
        return {"kept": [r["version"] for r in kept], "dropped": [], "files_removed": 0}
    oldest = min(r["published_at"] for r in kept)
    hours = max(0, int((datetime.now(timezone.utc) - oldest).total_seconds() // 3600) + 1)
    removed = 0
    for name in DATA_TABLES:
        if store.exists(name):
            removed += len(store.ensure(name).vacuum(retention_hours=hours, enforce_retention_duration=False, dry_run=dry_run, full=False))
    used = {f for r in kept for f in r["vector_indexes"].values()}
    for relative in (p for p in store.files.list("vectors") if p.endswith(".faiss")):
        if relative not in used:
            removed += 2
            if not dry_run:
                store.files.delete(relative)
                store.files.delete(ids_path(relative))
    if not dry_run:
        store.delete("index_manifest", f"version < {kept[0]['version']}")
    return {"kept": [r["version"] for r in kept], "dropped": [r["version"] for r in dropped], "files_removed": removed}
