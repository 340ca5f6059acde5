"""Published versions over time: rollback to an earlier version, and retention (vacuum)."""

from __future__ import annotations

from datetime import datetime, timezone

from graphwright.config import PipelineConfig
from graphwright.engines.vectors.overlay import OVERLAY_SUFFIX
from graphwright.stages.embed.pinned_files import files_of, is_search_file
from graphwright.stages.embed.search_files import unused_files
from graphwright.stages.publish import publish
from graphwright.storage.delta import IndexStore
from graphwright.storage.contracts import all_schemas
from graphwright.storage.log_retention import KEEP_LOG, trim_log
from graphwright.storage.manifest import DATA_TABLES, load_manifest, manifests
from graphwright.storage.orphans import remove_orphans


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
    and log entries only they needed, vector, lexical and graph files no kept version uses, and
    what killed runs left: their staged stage inputs, and the data files of commits they never
    made (storage.orphans; with nothing to drop too). The caller holds the run lock."""
    from graphwright.pipeline.staging import clear_leftovers

    rows = manifests(store)
    if keep < 1:
        raise ValueError("keep at least one version")
    staged = clear_leftovers(store.files, dry_run=dry_run)
    kept, dropped = rows[-keep:], rows[:-keep]
    pins = _oldest_pins(kept)
    # what only the dropped versions read: removed by a commit longer ago than the oldest kept version
    hours = max(0, int((datetime.now(timezone.utc) - min(r["published_at"] for r in kept)).total_seconds() // 3600) + 1)
    removed, orphans = staged, 0
    for name in DATA_TABLES:
        if not store.exists(name):
            continue
        if dropped:
            removed += len(store.ensure(name).vacuum(retention_hours=hours, enforce_retention_duration=False, dry_run=dry_run,
                                                     full=False, post_commithook_properties=KEEP_LOG))
        if name in pins:  # what killed writers left, which a vacuum keeps (storage.orphans)
            left = len(remove_orphans(store, name, pins[name], dry_run=dry_run))
            removed, orphans = removed + left, orphans + left
    if not dropped:  # nothing else to drop; the logs still grow with every run
        return {"kept": [r["version"] for r in kept], "dropped": [], "files_removed": removed, "orphans_removed": orphans,
                "log_files_removed": _trim_logs(store, pins, dry_run)}
    used = {f for r in kept for relative in r["vector_indexes"].values() if not is_search_file(relative)
            for f in files_of(store.files, relative)}  # an overlay's files include its base's
    for relative in (p for p in store.files.list("vectors") if p.endswith((".faiss", OVERLAY_SUFFIX))):
        if relative not in used:
            gone = files_of(store.files, relative) if relative.endswith(".faiss") else [relative]
            removed += len(gone)
            if not dry_run:
                for path in gone:
                    store.files.delete(path)
    for relative in unused_files(store.files, kept):  # lexical segments, synonyms, passage graphs
        removed += 1
        if not dry_run:
            store.files.delete(relative)
    if not dry_run:
        store.delete("index_manifest", f"version < {kept[0]['version']}")
    return {"kept": [r["version"] for r in kept], "dropped": [r["version"] for r in dropped], "files_removed": removed,
            "orphans_removed": orphans, "log_files_removed": _trim_logs(store, pins, dry_run)}


def _oldest_pins(kept: list[dict]) -> dict[str, int]:
    """{data table: the oldest of its Delta versions that the `kept` manifests pin}."""
    pins: dict[str, int] = {}
    for r in kept:
        for name, version in r["table_versions"].items():
            if name in DATA_TABLES and version is not None:
                pins[name] = min(version, pins.get(name, version))
    return pins


def _trim_logs(store: IndexStore, pins: dict[str, int], dry_run: bool) -> int:
    """Each table's Delta log below what is still read: a data table's below the oldest version the
    kept manifests pin (`pins`); graphwright's own tables (runs, stage_metrics, the LLM cache, lazy
    reports, ...), which are read at their latest version, below the checkpoint before their
    newest, for a process that read a version just before it (a query process writing lazy
    reports and cached answers while the nightly job publishes and vacuums)."""
    removed = 0
    for name in all_schemas():
        if not store.exists(name):
            continue
        if name in DATA_TABLES:
            if name in pins:
                removed += trim_log(store, name, pins[name], dry_run=dry_run)
        else:
            removed += trim_log(store, name, store.version(name), spare=1, dry_run=dry_run)
    return removed
