"""Published versions: one `index_manifest` row pins the Delta version of every data table and the vector
index files. Readers open a manifest version and read each table at its pinned version, so a
published version never changes under them; rollback (ops.versions) republishes an older manifest's pins."""

from __future__ import annotations

import json

import pyarrow as pa

from graphwright.config import PipelineConfig
from graphwright.storage.delta import IndexStore

DATA_TABLES = (
    "documents", "chunks", "extractions", "mentions", "assertions", "entities", "entity_aliases",
    "relationships", "communities", "community_reports", "embeddings",
)


class NoPublishedVersion(LookupError):
    pass


def manifests(store: IndexStore) -> list[dict]:
    rows = store.read("index_manifest").to_pylist()
    for row in rows:
        for key in ("table_versions", "vector_indexes", "counts", "vector_files"):
            row[key] = json.loads(row[key]) if row.get(key) is not None else None
    return sorted(rows, key=lambda r: r["version"])


def published(store: IndexStore) -> dict:
    """The latest published version's manifest, or {} before the first publish."""
    try:
        return load_manifest(store)
    except NoPublishedVersion:
        return {}


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
        """The version's vector index of `kind`; StorageError naming the file when it is gone or
        unreadable."""
        from graphwright.engines.vectors.overlay import index_files, load_index
        from graphwright.storage.health import StorageError, first_line

        relative = self.manifest["vector_indexes"][kind]
        repair = (f"`graphwright check --index {self.store.root} --repair` rebuilds it from the embeddings table "
                  f"(version {self.version} pins it)")
        for path in index_files(self.store.files, relative):
            if not self.store.files.exists(path):
                raise StorageError(f"vector file {path} of {self.store.root} (published version {self.version}, {kind} "
                                   f"vectors) is missing; {repair}", table="vectors")
        try:
            return load_index(self.store.files, relative)
        except (RuntimeError, OSError, ValueError) as exc:  # faiss raises RuntimeError on a corrupt file
            raise StorageError(f"vector file {relative} of {self.store.root} (published version {self.version}, {kind} "
                               f"vectors) cannot be read: {first_line(exc)}; {repair}", table="vectors") from None


