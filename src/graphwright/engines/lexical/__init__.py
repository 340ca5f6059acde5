"""Lexical (BM25) indexes, one per kind of item (chunk, entity, relationship), beside the vector
indexes; one engine, tantivy (tantivy_engine, imported when `search_index.lexical` chooses it).

In an index's files a kind's lexical index is a pool of immutable segment files,
`lexical/<kind>/<file>`, and one version file per state, `lexical/<kind>-<digest>.json`
(named by a hash of the items it holds), which names the segment files it uses and carries
tantivy's meta.json. An update adds segment and delete files and a new version file; a
published version's files are never overwritten. The version file is written last: its
presence means its segments are all there. Tantivy names a delete file by its segment and
opstamp, so two updates of one base (a rollback, then an update) can name different delete
files alike: one whose name the pool holds already goes to `lexical/<kind>/<digest>/`, and the
version file maps the name to it (`paths`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from graphwright.storage.location import is_uri

ENGINE = "tantivy"


def version_path(kind: str, digest: str) -> str:
    return f"lexical/{kind}-{digest}.json"


def ids_path(relative: str) -> str:
    """A version's item list: an Arrow IPC file (read without decoding: at 1.2M chunks the
    relationships' 2.26M items took 0.6 s to read and 0.7 s to write as Parquet, every update)."""
    return relative.removesuffix(".json") + ".ids.arrow"


def _legacy_ids_path(relative: str) -> str:
    return relative.removesuffix(".json") + ".ids.parquet"  # a version written before ids_path's format


def pool_path(version: dict, name: str) -> str:
    """Where a version's segment file `name` is stored (module docstring)."""
    return version.get("paths", {}).get(name) or f"lexical/{version['kind']}/{name}"


class Materialized:
    """A version's index as a local folder: links to the pool's segment files in a local index,
    downloads in an object store; removed with this object (or by close())."""

    def __init__(self, files, relative: str):
        self.version = json.loads(files.read_bytes(relative))
        if self.version.get("engine") != ENGINE:
            raise ValueError(f"{relative}: lexical index engine {self.version.get('engine')!r} is not supported (re-index)")
        self._tmp = tempfile.TemporaryDirectory(prefix="graphwright-lexical-")
        self.folder = Path(self._tmp.name)
        for name in self.version["files"]:
            stored = pool_path(self.version, name)
            if is_uri(files.location):
                with files.local(stored) as downloaded:  # streamed to a temporary file
                    shutil.move(downloaded, self.folder / name)
            else:
                os.symlink(Path(files.location).resolve() / stored, self.folder / name)
        (self.folder / "meta.json").write_text(self.version["meta"])
        (self.folder / ".managed.json").write_text(self.version["managed"])

    def close(self) -> None:
        self._tmp.cleanup()


def open_version(files, relative: str):
    """A published lexical index opened for search (engines.lexical.tantivy_engine.TantivyIndex),
    with its local folder kept alive as long as the index object."""
    from graphwright.engines.lexical.tantivy_engine import TantivyIndex

    local = Materialized(files, relative)
    index = TantivyIndex(local.folder)
    index.materialized = local
    return index


def previous_items(files, relative: str | None) -> pa.Table | None:
    """(item_id, row_hash) of the items a version file's index holds, or None."""
    if relative is None or not files.exists(relative):
        return None
    if files.exists(ids_path(relative)):
        return files.read_table(ids_path(relative))
    if files.exists(_legacy_ids_path(relative)):
        return pq.read_table(pa.BufferReader(files.read_bytes(_legacy_ids_path(relative))))
    return None


def previous_sources(files, relative: str | None) -> dict | None:
    """The table versions a version file's index was built from (None for one written before
    versions were recorded)."""
    if relative is None or not files.exists(relative):
        return None
    return json.loads(files.read_bytes(relative)).get("sources")


def write_version(files, kind: str, digest: str, previous: str | None, deletes: list[str], docs, items: pa.Table,
                  threads: int = 1, sources: dict | None = None) -> str:
    """Bring the index of `previous` (a version file, or None for a new index) to the version
    `digest`: delete the items `deletes`, add `docs` ((item id, body, row bytes), streamed); upload
    the new segment files, then the item list `items` (item_id, row_hash) and the version file,
    which records `sources`, the versions of the tables the items were read from."""
    from graphwright.engines.lexical import tantivy_engine

    relative = version_path(kind, digest)
    local = Materialized(files, previous) if previous else None
    try:
        folder = local.folder if local else Path(tempfile.mkdtemp(prefix="graphwright-lexical-"))
        used = tantivy_engine.write(folder, deletes, docs, threads)
        pool = f"lexical/{kind}"
        paths = {name: pool_path(local.version, name) for name in local.version["files"]} if local else {}
        for name in used:
            if name not in paths:
                # a name another version's file holds (module docstring) is written beside it
                paths[name] = f"{pool}/{digest}/{name}" if files.exists(f"{pool}/{name}") else f"{pool}/{name}"
                files.write_file(paths[name], folder / name)
        files.write_table(ids_path(relative), items.combine_chunks())
        moved = {name: paths[name] for name in used if paths[name] != f"{pool}/{name}"}
        version = {"engine": ENGINE, "analyzer": tantivy_engine.ANALYZER_VERSION, "kind": kind, "items": items.num_rows,
                   "files": used, "meta": (folder / "meta.json").read_text(), "managed": (folder / ".managed.json").read_text(),
                   "sources": sources or {}, **({"paths": moved} if moved else {})}
        files.write_bytes(relative, json.dumps(version).encode())
    finally:
        if local:
            local.close()
        elif "folder" in locals():
            shutil.rmtree(folder, ignore_errors=True)
    return relative


def deleted_share(files, relative: str, deleting: int, items: int) -> float:
    """The share of the documents a version's index would hold that are deleted (still counted by
    BM25 until a merge drops them) once `deleting` more are deleted and it holds `items` live ones."""
    meta = json.loads(json.loads(files.read_bytes(relative))["meta"])
    deleted = deleting + sum((s.get("deletes") or {}).get("num_deleted_docs", 0) for s in meta["segments"])
    return deleted / max(1, deleted + items)


def files_in_use(files, versions: list[str]) -> set[str]:
    """Every file the lexical version files `versions` need: themselves, their item lists and
    their segments (what retention must keep)."""
    used = set()
    for relative in versions:
        if not files.exists(relative):
            continue
        version = json.loads(files.read_bytes(relative))
        listed = [p for p in (ids_path(relative), _legacy_ids_path(relative)) if files.exists(p)] or [ids_path(relative)]
        used |= {relative, *listed} | {pool_path(version, name) for name in version["files"]}
    return used
