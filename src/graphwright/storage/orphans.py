"""Data files that no Delta version lists: what a writer killed before its commit leaves in a
table's folder (storage.patch writes a local table's new files straight into it, as delta-rs's
own writers write theirs). Readers never see them, and Delta's vacuum (in its default mode)
deletes only files that a commit removed, so every killed run would leave its files for ever.
Retention (ops.versions.retain) deletes them.

A file is an orphan when neither the oldest version still needed nor any commit still in the log
names it (added or removed): the oldest needed version's snapshot and the later commits are
what any kept reader, and `storage.changes`, can ask for, and a file an earlier commit removed
is left to vacuum, which keeps it for the hours a reader of a dropped version may still need.
Delta's own `full` vacuum is not used: it keeps only what the newest snapshot and its unexpired
tombstones name, and a published version older than the tombstone retention (a week) would lose
files it still reads."""

from __future__ import annotations

import time
from urllib.parse import unquote

import pyarrow as pa

from graphwright.storage import health
from graphwright.storage.changes import commit_actions

# younger files may belong to a commit still being made (a writer that does not take the run lock)
ORPHAN_AGE_S = 3600


def orphan_files(store, name: str, oldest_needed: int, *, min_age_s: float = ORPHAN_AGE_S,
                 now: float | None = None) -> list[str] | None:
    """The data files (paths in table `name`'s folder) that neither Delta version `oldest_needed`
    nor a commit still in the log names, last written more than `min_age_s` ago; None when a
    commit after `oldest_needed` cannot be read whole (its log file gone, a deletion vector):
    then nothing is known to be unused."""
    import obstore

    latest = store.version(name)
    if latest is None or oldest_needed > latest:
        return None
    snapshot = pa.table(store._open(name, oldest_needed, pinned=True).get_add_actions(flatten=True))
    named = {unquote(p) for p in snapshot.column("path").to_pylist()}
    logged, _ = health.log_versions(health.log_entries(store.table_files(name)))
    for version in sorted(set(logged) | set(range(oldest_needed + 1, latest + 1))):
        commit = commit_actions(store, name, version)
        if commit is None:
            if version > oldest_needed:
                return None
            continue  # an earlier commit that cannot be read: what it removed is vacuum's to judge
        named.update(commit.added, commit.moved, commit.removed)
    cutoff = (time.time() if now is None else now) - min_age_s
    found = []
    for batch in obstore.list(store.table_files(name)):
        for meta in batch:
            path = meta["path"]
            if _data_file(path) and path not in named and meta["last_modified"].timestamp() < cutoff:
                found.append(path)
    return sorted(found)


def _data_file(path: str) -> bool:
    """A Parquet file outside the log and outside hidden folders (`_delta_log`, `_change_data`, ...)."""
    return path.endswith(".parquet") and not any(part.startswith(("_", ".")) for part in path.split("/"))


def remove_orphans(store, name: str, oldest_needed: int, *, dry_run: bool = False) -> list[str]:
    """Delete table `name`'s orphan files (orphan_files); the paths deleted (or, `dry_run`, that would be)."""
    import obstore

    found = orphan_files(store, name, oldest_needed) or []
    if not dry_run:
        table_store = store.table_files(name)
        for path in found:
            obstore.delete(table_store, path)
    return found
