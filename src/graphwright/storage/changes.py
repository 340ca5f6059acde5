"""What changed in a Delta table since a version, read from its log commit by commit, so that
something kept beside a table (a lexical index) is brought up to date from the rows that
changed instead of from the whole table.

Each commit's JSON lists the data files it added and removed. A file added with dataChange true
holds new or changed rows (and maybe unchanged rows rewritten with them: a DELETE's rewrite). A
file added with dataChange false holds rows copied unchanged from files the same commit removed
(a patch's kept rows, a compaction); a Delta streaming reader skips those too, and so does this,
beyond their key column. A key is deleted by a commit that removed a file holding it and added
none holding it. A patch (storage.patch) names the keys it deleted in its commitInfo; for such a
commit the key columns of the files it removed and moved are not read (at 1.2M chunks a 0.1%
update's relationships patch moves 2.26M keys: 1.9 s a reader). Where the log cannot say (a
commit file cleaned up, a data file vacuumed, a deletion vector), `changes_since` answers None
and the caller reads the table whole."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from graphwright.storage import contracts
from graphwright.storage.file_commits import DELETED_KEYS, MOVED_FROM
from graphwright.storage.patch import read_data_file


@dataclass
class Changes:
    rows: pa.Table  # the current content (the columns asked for) of every key added or changed
    deleted: pa.Array  # keys deleted since (a key added and deleted after `since` may be among them)
    now: int  # the version the changes lead to
    commits: int
    files_read: int  # data files read whole
    keys_read: int  # data files of which only the key column was read


@dataclass
class _Commit:
    added: list[str]  # dataChange true
    moved: list[str]  # dataChange false
    removed: list[str]
    deleted: dict | None = None  # {"key": column, "values": [...]}: the keys the commit deleted, as it names them
    added_bytes: int = 0  # the sizes of every file it added, moved ones included
    moved_from: dict | None = None  # {moved file: [[source file, its rows, positions left out], ...]} (patch.delete_matching)
    records: dict = field(default_factory=dict)  # {file moved: its rows}, where the add action's stats say


def commit_actions(store, name: str, version: int) -> _Commit | None:
    """The data files one commit added and removed, or None if its log file is gone or it uses
    something this reader does not follow (deletion vectors)."""
    import obstore

    try:
        raw = bytes(obstore.get(store.table_files(name), f"_delta_log/{version:020d}.json").bytes())
    except Exception:  # noqa: BLE001 - cleaned up by log retention, or never there
        return None
    commit = _Commit([], [], [])
    for line in raw.decode().splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        named = action.get("commitInfo", {}).get(DELETED_KEYS)
        if isinstance(named, dict) and isinstance(named.get("values"), list):
            commit.deleted = named
        sources = action.get("commitInfo", {}).get(MOVED_FROM)
        if isinstance(sources, dict):
            commit.moved_from = sources
        for kind in ("add", "remove"):
            if kind in action:
                entry = action[kind]
                if entry.get("deletionVector"):
                    return None
                path = unquote(entry["path"])
                if kind == "add":
                    commit.added_bytes += int(entry.get("size") or 0)
                if kind == "remove":
                    commit.removed.append(path)
                elif entry.get("dataChange", True):
                    commit.added.append(path)
                else:
                    commit.moved.append(path)
                    # only a moved file's rows are asked for (their account, stages.resolve.state):
                    # the stats of other files, with every column's bounds, are not parsed
                    rows = json.loads(entry.get("stats") or "{}").get("numRecords")
                    if isinstance(rows, int):
                        commit.records[path] = rows
    return commit


def bytes_added(store, name: str, first: int, last: int) -> int | None:
    """Bytes of the data files that commits `first`..`last` added (a file a later commit rewrote
    still counts), from their log files; None when one is gone (cleaned up after a checkpoint)."""
    total = 0
    for version in range(first, last + 1):
        commit = commit_actions(store, name, version)
        if commit is None:
            return None
        total += commit.added_bytes
    return total


def changes_since(store, name: str, since: int | None, key: str, columns: list[str]) -> Changes | None:
    """The rows of `name` (its `columns`, which include `key`) added or changed since Delta
    version `since`, and the keys deleted since; None when the log cannot tell."""
    now = store.version(name)
    if since is None or now is None or since > now:
        return None
    commits = []
    for version in range(since + 1, now + 1):
        commit = commit_actions(store, name, version)
        if commit is None:
            return None
        commits.append(commit)
    empty_keys = pa.array([], pa.string())
    seen, rows_parts, deleted_parts = empty_keys, [], []  # seen: keys a newer commit decided
    files_read = keys_read = 0
    try:
        # newest first: the latest commit that added a key with a data change, or deleted it,
        # decides; a key a commit only moved is decided by an older one (or unchanged since)
        for commit in reversed(commits):
            rows = [read_data_file(store, name, path, columns) for path in commit.added]
            files_read += len(rows)
            added = _keys([r.column(key) for r in rows])
            if commit.deleted is not None and commit.deleted.get("key") == key:
                gone = pa.array(commit.deleted["values"], pa.string())
                gone = gone.filter(pc.invert(pc.is_in(gone, value_set=added)))
            else:
                moved = [read_data_file(store, name, p, [key]).column(key) for p in commit.moved]
                gone = [read_data_file(store, name, p, [key]).column(key) for p in commit.removed]
                keys_read += len(moved) + len(gone)
                gone = _keys(gone)
                gone = gone.filter(pc.invert(pc.is_in(gone, value_set=pa.concat_arrays([added, _keys(moved)]))))
            for table in rows:
                rows_parts.append(table.filter(pc.invert(pc.is_in(table.column(key), value_set=seen))))
            deleted_parts.append(gone.filter(pc.invert(pc.is_in(gone, value_set=seen))))
            seen = pa.concat_arrays([seen, added, gone])
    except Exception:  # noqa: BLE001 - a data file the log names was vacuumed: the caller reads the table
        return None
    if rows_parts:
        rows = pa.concat_tables(rows_parts)
    else:
        full = contracts.schema(name).arrow
        rows = pa.schema([full.field(c).with_nullable(True) for c in columns]).empty_table()
    deleted = pc.unique(pa.concat_arrays(deleted_parts)) if deleted_parts else empty_keys
    return Changes(rows, deleted, now, len(commits), files_read, keys_read)


def _keys(columns: list) -> pa.Array:
    # the columns' chunks, not the columns: pa.chunked_array converts a ChunkedArray it is given
    # value by value through Python (1.1 s for the 2.26M keys of a relationships table)
    chunks = [c for column in columns for c in (column.chunks if isinstance(column, pa.ChunkedArray) else [column])]
    return pa.chunked_array(chunks, pa.string()).combine_chunks() if chunks else pa.array([], pa.string())
