"""`graphwright check --repair`: carry out the repairs ops.check offers, under the run lock.
Nothing is deleted: broken commits and truncated data files move to <index>/quarantine/."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa

from graphwright.engines.vectors.overlay import OVERLAY_SUFFIX
from graphwright.ops.check import QUARANTINE, check, check_version
from graphwright.stages.embed.pinned_files import files_of
from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import DATA_TABLES, manifests


def rebuild_targets(tables: set[str]) -> list[str]:
    """The tables to rebuild for damaged `tables`: everything the stage that writes each one
    writes, since a stage derives what is left to do from all its outputs (documents come from
    the sources: an index run re-reads them)."""
    from graphwright.pipeline.definition import INDEX

    out: set[str] = set()
    for stage in INDEX:
        if tables & set(stage.writes) and stage.name != "ingest":
            out |= set(stage.writes) & set(DATA_TABLES)
    return sorted(out)


def _quarantine(store: IndexStore, table: str, relative: str, stamp: str) -> None:
    """Move a file of a table (relative to its folder) under <index>/quarantine/<stamp>/<table>/."""
    import obstore

    files = store.table_files(table)
    store.files.write_bytes(f"{QUARANTINE}/{stamp}/{table}/{relative}", bytes(obstore.get(files, relative).bytes()))
    obstore.delete(files, relative)


def repair(store: IndexStore, run_id: str) -> dict:
    """Repair what check finds; returns what was done and what is left to the user."""
    import obstore
    from deltalake import DeltaTable

    from graphwright.storage.health import placeholder_commit

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    found = check(store)["problems"]
    done, damaged = [], set()
    # 1. broken commits: the first broken one and every later one leave the log
    for table in sorted({p["table"] for p in found if p["what"] == "log" and p["files"]}):
        first = min(p["version"] for p in found if p["table"] == table and p["what"] == "log" and p["files"])
        entries = sorted(n for n in _log_names(store, table) if n.endswith(".json") and int(n[:20]) >= first)
        for name in entries:  # each moves to the quarantine, and a placeholder keeps its number from being reused
            _quarantine(store, table, f"_delta_log/{name}", stamp)
            obstore.put(store.table_files(table), f"_delta_log/{name}",
                        placeholder_commit(f"commit {int(name[:20])} was broken; moved to {QUARANTINE}/{stamp}/{table}/ on {stamp}"))
        done.append(f"{table}: moved commits {first}..{int(entries[-1][:20])} to {QUARANTINE}/{stamp}/{table}/ (placeholders "
                    f"stand in for them); its rows are those of version {first - 1}")
        damaged.add(table)
    # 2. data files gone or truncated at the latest version: truncated ones are quarantined, then FSCK drops both
    for p in found:
        if p["what"] == "files":
            for relative in p["files"]:
                if store.table_files(p["table"]) and _exists(store, p["table"], relative):
                    _quarantine(store, p["table"], relative, stamp)
            dt = DeltaTable(store.path(p["table"]), storage_options=store.storage_options)
            removed = dt.repair(dry_run=False).get("files_removed") or []
            done.append(f"{p['table']}: dropped {len(removed) or len(p['files'])} missing data file(s) from its latest version "
                        f"(their rows are gone from it)")
            damaged.add(p["table"])
    # 3. vector files, rebuilt from the embeddings table at the version the manifest pins
    rebuilt = set()  # an overlay and its base both damaged: one rebuild
    for p in found:
        if p["what"] == "vector" and p["files"][0].endswith((".faiss", OVERLAY_SUFFIX)) and (p["version"], p["files"][1]) not in rebuilt:
            rebuilt.add((p["version"], p["files"][1]))
            done.append(_rebuild_vectors(store, p["version"], p["files"][1]))
    left: list[str] = []
    if damaged & set(DATA_TABLES) or any(p["what"] in ("rows", "search") for p in found):
        done_rollback, advice = _roll_back_to_intact(store, run_id)
        done += done_rollback
        left += advice
    after = check(store)
    for p in after["problems"]:
        if left:
            p["repair"] = left[0]
    return {**after, "repaired": done, "left": left}


def _log_names(store: IndexStore, table: str) -> list[str]:
    from graphwright.storage.health import log_entries

    return list(log_entries(store.table_files(table)))


def _exists(store: IndexStore, table: str, relative: str) -> bool:
    import obstore
    from obstore.exceptions import NotFoundError

    try:
        obstore.head(store.table_files(table), relative)
        return True
    except (NotFoundError, FileNotFoundError):
        return False


def _rebuild_vectors(store: IndexStore, version: int, kind: str) -> str:
    from graphwright.config import PipelineConfig
    from graphwright.engines.embed import model_name
    from graphwright.stages.embed.vector_files import write_vector_index

    rows = {m["version"]: m for m in manifests(store)}
    manifest = rows[version]
    config = PipelineConfig.model_validate_json(manifest["config"])
    relative, written = write_vector_index(store, kind, model_name(config.embed), config,
                                           at=manifest["table_versions"]["embeddings"], rebuild=True)
    pinned = manifest["vector_indexes"][kind]
    # an overlay and the base it lays over hold the same vectors as one file of the same state
    layered = pinned.endswith(OVERLAY_SUFFIX) and relative == pinned.removesuffix(OVERLAY_SUFFIX) + ".faiss"
    if relative != pinned and not layered:
        return (f"vectors: the embeddings table at version {manifest['table_versions']['embeddings']} no longer gives "
                f"{pinned}; roll back or re-index")
    recorded = manifest.get("vector_files") or {}
    if layered or any(recorded.get(path) not in (None, digest) for path, digest in written.items()):
        # an HNSW build need not repeat its bytes: record what the file now holds
        row = store.read("index_manifest", where=f"version = {version}").to_pylist()[0]
        indexes = {**manifest["vector_indexes"], kind: relative}
        # the digests of the files the version now pins (an overlay's are dropped with it)
        pinned_files = {f for entry in indexes.values() for f in files_of(store.files, entry)}
        row["vector_files"] = json.dumps({f: d for f, d in {**recorded, **written}.items() if f in pinned_files}, sort_keys=True)
        row["vector_indexes"] = json.dumps(indexes, sort_keys=True)
        store.upsert("index_manifest", pa.Table.from_pylist([row]))
    return f"vectors: rebuilt {relative} from the embeddings table (published version {version})"


def _roll_back_to_intact(store: IndexStore, run_id: str) -> tuple[list[str], list[str]]:
    """Roll back to the newest published version that is intact; else say what to rebuild."""
    from graphwright.ops.versions import rollback

    rows = manifests(store)
    for manifest in reversed(rows):
        if not [p for p in check_version(store, manifest) if p.what != "vector"]:
            result = rollback(store, manifest["version"], run_id)
            return [f"rolled back to published version {manifest['version']}, the newest intact one: published as version "
                    f"{result['version']}"], ["run `graphwright index SOURCES --index DIR` to recompute what came after it"]
    damaged = {p.table for m in rows[-1:] for p in check_version(store, m) if p.table in DATA_TABLES}
    rebuild = rebuild_targets(damaged)
    advice = [f"no published version is intact; rerun the index from the sources: `graphwright index SOURCES --index "
              f"{store.root}" + "".join(f" --rebuild {t}" for t in rebuild) + "`"
              + (" (documents lost rows: the run reads them from the sources again)" if "documents" in damaged else "")]
    return [], advice
