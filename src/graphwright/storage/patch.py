"""Writes in proportion to the change: a table's data files, read one at a time, and a patch that
replaces the rows of some keys by rewriting only the files that hold them, in one Delta commit.

`IndexStore.replace_parts_if_changed` diffs the whole table to learn what changed; a stage that
knows which keys changed (resolve, cluster, report) hands them here instead. Files that hold none
of the keys stay as they are: they are neither read beyond their key column nor rewritten. A file
that holds some is rewritten without them. The new rows go to new files. A patch killed before its
commit changes nothing; rerun, it removes the same keys and adds the same rows. Where another
writer removed a file it rewrote (a compaction, a deletion) between the listing and the commit, the
commit is refused (storage.file_commits) and the rewrite made again from the new version."""

from __future__ import annotations

import io
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graphwright.storage import contracts, location
from graphwright.storage.diff import key_column, row_digests
from graphwright.storage.file_commits import NewFiles, commit_files, with_retries
from graphwright.storage.health import data_file_error
from graphwright.storage.parquet_files import write_parquet

MOVED_FILE_BYTES = 256 << 20  # Arrow bytes of kept rows delete_matching writes to one file
MOVED_FROM_NAMED = 200_000  # at most this many left-out row positions in one commit; past it, none are named
# up to about this many slices (runs of kept rows), a rewritten file's rows are sliced, not filtered:
# the Parquet writer pays about 50 us a slice (a 284 MB file of 23k slices: 1.8-2.2 s to write against 0.8 s)
KEPT_RUNS_SLICED = 5_000


def data_files(store, name: str) -> list[tuple[str, int]]:
    """(path relative to the table, rows) of each data file of the table's current version."""
    return [(path, rows) for path, rows, _ in _data_files(store, name)]


def _data_files(store, name: str, dt=None) -> list[tuple[str, int, dict[str, str]]]:
    """data_files, with each file's partition values (of snapshot `dt`, if given)."""
    dt = dt if dt is not None else store._table(name)
    if dt is None:
        return []
    actions = pa.table(dt.get_add_actions(flatten=True))
    columns = [c for c in actions.column_names if c.startswith("partition.")]
    values = [dict(zip((c[len("partition."):] for c in columns), row)) for row in zip(*(actions.column(c).to_pylist() for c in columns))]
    return list(zip(actions.column("path").to_pylist(), actions.column("num_records").to_pylist(), values or [{}] * actions.num_rows))


def retired_columns(store, name: str) -> list[str]:
    """Columns the table holds that its contract no longer lists (written by an older layout):
    a whole rewrite of the table drops them; a patch cannot."""
    dt = store._table(name)
    if dt is None:
        return []
    return [c for c in dt.schema().to_arrow().names if c not in contracts.schema(name).arrow.names]


def without_rows(table: pa.Table, hit: pa.Array | pa.ChunkedArray) -> pa.Table:
    """`table` less the rows `hit` marks (a null mark keeps its row), in order. An update leaves
    most rows of a file it rewrites: the runs of kept rows are taken as slices, which copy nothing
    (filtering copied every chunk list of the file: 0.3-1.1 s for one of the 1.2M-chunk
    relationships files, 284 MB, against 0.04 s for its 3,571 runs, which the writer takes 0.1-0.2 s
    longer to write). Filtered instead past KEPT_RUNS_SLICED runs, or when fewer than half the rows
    stay: slices hold the whole file read, a copy only what is kept."""
    drop = np.asarray(pc.fill_null(hit, False), dtype=bool)
    if len(drop) != table.num_rows:
        raise ValueError(f"without_rows: {len(drop)} marks for {table.num_rows} rows")
    edges = np.flatnonzero(np.diff(np.r_[False, ~drop, False].astype(np.int8)))
    if len(edges) // 2 > KEPT_RUNS_SLICED or 2 * int(drop.sum()) > len(drop):
        return table.filter(pa.array(~drop))
    return pa.concat_tables([table.slice(a, b - a) for a, b in zip(edges[::2].tolist(), edges[1::2].tolist())]
                            or [table.slice(0, 0)])


def read_data_file(store, name: str, path: str, columns: list[str]) -> pa.Table:
    """Some columns of one data file of a table (cast to its contract; a column the file predates
    is read as nulls). Local files are read in place; an object store's, in one get. A file that
    is missing or cannot be read raises StorageError naming the table and the file (DataFileMissing,
    a FileNotFoundError too, when it is gone)."""
    from obstore.exceptions import BaseError as ObjectStoreError

    try:
        if store.is_remote:
            import obstore

            blob = obstore.get(location.open_store(store.path(name), store.storage_options), path).bytes()
            source = pq.ParquetFile(io.BytesIO(bytes(blob)))
        else:
            source = pq.ParquetFile(Path(store.path(name)) / path)
        have = set(source.schema_arrow.names)
        table = source.read(columns=[c for c in columns if c in have])
    except (OSError, pa.ArrowException, ObjectStoreError) as exc:
        raise data_file_error(store.root, name, path, exc) from exc
    schema = contracts.schema(name).arrow
    for c in columns:
        if c not in have:
            table = table.append_column(schema.field(c).with_nullable(True), pa.nulls(table.num_rows, schema.field(c).type))
    return table.select(columns).cast(pa.schema([schema.field(c).with_nullable(True) for c in columns]))


def patch_table(store, name: str, removed_keys, parts: Iterable[pa.Table]) -> dict[str, int]:
    """Remove the rows whose primary key is in `removed_keys` or among the keys of `parts`, and add
    the rows of `parts`, in one commit (an upsert by key, with deletions); only the files holding
    such a key are rewritten. Returns {"files_rewritten", "files_kept", "files_added",
    "rows_removed", "rows_added"}."""
    schema = contracts.schema(name)
    if schema.partition_by:
        raise ValueError(f"patch_table does not write partitioned tables ({name})")
    key = tuple(schema.primary_key)
    stats = {"files_rewritten": 0, "files_kept": 0, "files_added": 0, "rows_removed": 0, "rows_added": 0}
    # two tasks at a time, each mostly Arrow's work off the GIL: the new rows' files are written
    # while the next part is made and while the old files are rewritten (at 1.2M chunks, a 0.1%
    # update's entity rows are 330 MB of chunk lists, written beside the rewrite of the file that held them)
    with NewFiles(store, name) as new_files, ThreadPoolExecutor(2, thread_name_prefix=f"patch-{name}") as pool:
        adds: list[tuple[str, str, int]] = []
        writes: list[Future] = []
        keys = [pa.array(removed_keys, pa.string()) if not isinstance(removed_keys, pa.Array) else removed_keys.cast(pa.string())]
        for part in parts:
            data = schema.validate(part)
            if not data.num_rows:
                continue
            keys.append(key_column(data, key))
            relative, path = new_files.new()
            writes.append(pool.submit(write_parquet, data, path))
            adds.append((relative, path, data.num_rows))
            stats["rows_added"] += data.num_rows
            del data, part
            while sum(not w.done() for w in writes) > 2:  # a few parts held at most
                wait(writes, return_when=FIRST_COMPLETED)
        touched = pc.unique(pa.concat_arrays(keys))
        added = pa.concat_arrays(keys[1:]) if len(keys) > 1 else pa.array([], pa.string())  # the parts' keys
        if stats["rows_added"] and pc.count_distinct(added).as_py() != stats["rows_added"]:
            raise contracts.SchemaError(f"table {name}: the rows of a patch repeat a primary key {list(key)}")

        def rewrite(path: str) -> tuple[str, pa.Array, tuple[str, str, int] | None]:
            """(path, the keys of its rows removed, its kept rows' new file) for one data file."""
            file_keys = key_column(read_data_file(store, name, path, list(key)), key)
            hit = pc.is_in(file_keys, value_set=touched)
            removed = file_keys.filter(hit)
            if not len(removed) or len(removed) == len(hit):
                return path, removed, None
            kept = without_rows(read_data_file(store, name, path, schema.arrow.names), hit)
            relative, local = new_files.new()
            write_parquet(schema.validate(kept, check_key=False), local)  # one file's rows: keys checked when written
            return path, removed, (relative, local, kept.num_rows)

        def attempt() -> None:  # from the table's latest version, again if another writer removed a file rewritten
            stats.update(files_rewritten=0, files_kept=0, rows_removed=0)
            removes: list[str] = []
            moved: list[tuple[str, str, int]] = []  # rows copied unchanged from the files rewritten
            hit_keys: list[pa.Array] = [pa.array([], pa.string())]
            listed = store._table(name)  # the version whose files are rewritten (None: no table yet)
            if len(touched) and listed is not None:
                # (a 0.1% update at 1.2M chunks rewrites all three files of the relationships table)
                files = [path for path, _, _ in _data_files(store, name, listed)]
                for path, removed, kept in pool.map(rewrite, files):
                    if not len(removed):
                        stats["files_kept"] += 1
                        continue
                    stats["files_rewritten"] += 1
                    stats["rows_removed"] += len(removed)
                    removes.append(path)
                    hit_keys.append(removed)
                    if kept is not None:
                        moved.append(kept)
            for done in writes:
                done.result()
            stats["files_added"] = len(adds) + len(moved)
            if not (adds or moved or removes or listed is None):
                return
            gone = pa.concat_arrays(hit_keys)
            gone = gone.filter(pc.invert(pc.is_in(gone, value_set=added)))
            store._writing(name)
            commit_files(store, store.ensure(name), name, new_files, adds, removes, moved,
                         deleted=(key, gone) if len(key) == 1 else None, listed=listed)

        with_retries(new_files, attempt)
    return stats


def distinct_per_file(store, name: str, column: str) -> dict[str, pa.Array]:
    """The distinct values of `column` in each data file of the table's current version: what a
    stage that reads them anyway hands delete_matching, so that the files are not read twice."""
    return read_partition(store, name, [column], {}, column)[1]


def read_partition(store, name: str, columns: list[str], partition: dict[str, str], key: str) -> tuple[pa.Table, dict[str, pa.Array]]:
    """`columns` of the rows of one partition of the current version, read file by file, and the
    distinct values of `key` in each file: what delete_matching is handed as `known`, so that
    deleting some of these rows does not read every file of the partition again. Files are read
    a few at a time: on an object store each is a request of its own."""
    schema = contracts.schema(name).arrow
    paths = [path for path, _, values in _data_files(store, name) if all(values.get(c) == v for c, v in partition.items())]
    with ThreadPoolExecutor(4, thread_name_prefix=f"read-{name}") as pool:
        parts = list(pool.map(lambda path: read_data_file(store, name, path, columns), paths))
    known = {path: pc.unique(part.column(key).combine_chunks()) for path, part in zip(paths, parts)}
    return pa.concat_tables([pa.schema([schema.field(c).with_nullable(True) for c in columns]).empty_table(), *parts]), known


def delete_matching(store, name: str, column: str, values, where: dict[str, str] | None = None,
                    known: dict[str, pa.Array] | None = None, record_moves: bool = False) -> int:
    """Delete the rows whose `column` holds one of `values` (and whose columns equal `where`'s
    values; conditions on partition columns choose the files read), in one commit that rewrites
    only the files holding such a row: their other rows are moved, as a patch moves them. A Delta
    DELETE scans every file of the partitions it names, and a predicate lists at most
    DELETE_IN_KEYS values: the 6k chunks a 1% update removes at 1.2M chunks took 9.6 s over
    mentions, assertions and extractions. `known`: distinct_per_file's answer for some files of
    the current version (the others are read). `record_moves`: the commit names, for each file of
    moved rows, the files they came from, in order, with each one's rows and the positions of
    those left out (MOVED_FROM), so that what was derived from the old files' rows can be carried
    over to the new file without reading it (stages.resolve.state codes the mentions and the
    assertions per file). Returns how many rows went."""
    schema, where = contracts.schema(name), where or {}
    value_set = pa.array(sorted(set(values)), pa.string()) if not isinstance(values, pa.Array) else pc.unique(values.cast(pa.string()))
    if not len(value_set) or not store.exists(name):
        return 0
    stored = [c for c in schema.arrow.names if c not in schema.partition_by]  # partition values are in the path
    other = {c: v for c, v in where.items() if c not in schema.partition_by}

    def rewrite(listed, new_files: NewFiles) -> tuple[int, list[str], list[tuple], dict[str, list]]:
        """(rows deleted, the files removed, the files of moved rows, where those rows came from) of
        the files of snapshot `listed`."""
        deleted, removes, moved = 0, [], []
        pending: dict[tuple, list[pa.Table]] = {}  # kept rows per partition, written together
        sources: dict[tuple, list] = {}  # per partition: [file, its rows, the positions left out] of each pending part
        moved_from: dict[str, list] = {}

        def flush(partition: dict) -> None:
            kept = pa.concat_tables(pending.pop(tuple(partition.items())))
            if kept.num_columns and kept.column(0).num_chunks > KEPT_RUNS_SLICED:  # many files' slices: one copy writes faster
                kept = kept.combine_chunks()
            relative, local = new_files.new(partition)
            write_parquet(kept, local)
            moved.append((relative, local, kept.num_rows, partition))
            moved_from[relative] = sources.pop(tuple(partition.items()), None)

        for path, _, partition in _data_files(store, name, listed):
            if any(partition.get(c) != v for c, v in where.items() if c in schema.partition_by):
                continue
            if known is not None and path in known and not pc.any(pc.is_in(known[path], value_set=value_set)).as_py():
                continue
            rows = read_data_file(store, name, path, [column, *other])
            hit = pc.is_in(rows.column(column), value_set=value_set)
            for c, v in other.items():
                hit = pc.and_(hit, pc.fill_null(pc.equal(rows.column(c), v), False))
            n_hit = pc.sum(hit).as_py() or 0
            if not n_hit:
                continue
            deleted += n_hit
            removes.append(path)
            if n_hit < len(hit):
                kept = without_rows(read_data_file(store, name, path, stored), hit)
                for c in schema.partition_by:
                    kept = kept.append_column(c, pa.array([partition[c]] * kept.num_rows, pa.string()))
                # the kept rows of many rewritten files go to few files, as a Delta DELETE writes
                # them: one file each left resolve a segment each to code and load every run
                group = pending.setdefault(tuple(partition.items()), [])
                group.append(schema.validate(kept, check_key=False).select(stored))  # keys checked when written
                if record_moves:
                    sources.setdefault(tuple(partition.items()), []).append(
                        [path, len(hit), np.flatnonzero(hit.to_numpy(zero_copy_only=False)).tolist()])
                if sum(t.nbytes for t in group) >= MOVED_FILE_BYTES:
                    flush(partition)
        for key in list(pending):
            flush(dict(key))
        return deleted, removes, moved, moved_from

    with NewFiles(store, name) as new_files:
        def attempt() -> None:  # from the table's latest version, again if another writer removed a file rewritten
            listed = store._table(name)
            counts["deleted"], removes, moved, moved_from = rewrite(listed, new_files)
            if not removes:
                return
            store._writing(name)
            named = sum(len(left_out) for parts in moved_from.values() for _, _, left_out in parts or ())
            commit_files(store, store.ensure(name), name, new_files, [], removes, moved,
                         moved_from=moved_from if record_moves and named <= MOVED_FROM_NAMED else None, listed=listed)

        counts = {"deleted": 0}
        with_retries(new_files, attempt)
    return counts["deleted"]


def patch_changed(store, name: str, table: pa.Table, current: pa.Table | None = None) -> dict[str, int]:
    """Make `table` the whole content of a small table (aliases, reports) by a patch: the rows
    whose content is new are written and the keys no longer in it removed; files holding
    neither stay, so readers of its changes see only what changed (an overwrite made every row
    new). `current`: the table's rows if the caller holds them. Returns patch_table's counts and
    `keys_removed`."""
    schema = contracts.schema(name)
    key = tuple(schema.primary_key)
    table = schema.validate(table)
    exists = store.exists(name)
    if current is None:
        current = store.read(name, columns=table.schema.names) if exists else schema.arrow.empty_table()
    old, new = row_digests(current.select(table.schema.names), key), row_digests(table, key)
    changed = pc.invert(pc.is_in(new.column("__digest"), value_set=old.column("__digest")))
    old_keys = key_column(old, key)
    removed = old_keys.filter(pc.invert(pc.is_in(old_keys, value_set=key_column(new, key))))
    if exists and not pc.any(changed).as_py() and not len(removed):
        return {"rows_added": 0, "rows_removed": 0, "keys_removed": 0}
    return {**patch_table(store, name, removed, [table.filter(changed)]), "keys_removed": len(removed)}
