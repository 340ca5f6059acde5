"""Delta Lake I/O for an index directory. Stages never touch Delta directly: they hand Arrow
tables to an IndexStore, which validates them against their contract and commits.

Reads go through deltalake's QueryBuilder (DataFusion). With deltalake 1.6.6 and pyarrow 26,
`DeltaTable.to_pyarrow_table()` aborts the interpreter at exit in about a third of runs
("terminate called without an active exception", exit 134), which would turn a good CLI run
into a failure; QueryBuilder reads did not in our trials.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder, Schema, write_deltalake
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction

from graphwright.storage import contracts, health, location
from graphwright.storage.health import table_error
from graphwright.storage.log_retention import KEEP_LOG, TABLE_PROPERTIES
from graphwright.storage.diff import key_column, row_diff, row_digests
from graphwright.storage.parquet_files import delta_write, spill
from graphwright.storage.snapshots import TableSnapshots


def sql_list(values) -> str:
    """A SQL IN-list of string literals."""
    return "(" + ", ".join("'" + str(v).replace("'", "''") + "'" for v in values) + ")"


# rows_in joins more keys than this in one scan: an IN-list query reads the whole table (at 1.2M
# chunks, the texts of 200 / 1000 / 5000 chunks: 0.4 / 1.1 / 5.3 s by IN-lists, 0.7 / 0.7 / 0.8 s joined)
IN_LIST_KEYS = 500
# Every DELETE scans the table and rewrites each file holding a match, so fewer, longer IN lists are
# faster: deleting 14k embeddings of a 1.2M-chunk index took 170 s in lists of 1000, 39 s in lists of
# 5000 (bench/delete_batches.py). Not one list for all: delta-rs parses the predicate recursively on
# the calling thread, and a list of 22k values overflowed an 8 MB stack (10k a 2 MB one) and killed
# the process. A MERGE joined on the values held 11 GB to delete 7k chunks' mentions.
DELETE_IN_KEYS = 5000


def read_in(read: Callable[..., pa.Table], name: str, column: str, values, columns: list[str]) -> pa.Table:
    """Rows of `name` whose `column` is one of `values`, asked for 1000 keys at a time. `read` is
    IndexStore.read or a reader pinned to a published version."""
    values = sorted(set(values))
    parts = [read(name, columns=columns, where=f'"{column}" IN {sql_list(values[o:o + 1000])}') for o in range(0, len(values), 1000)]
    if not parts:
        schema = contracts.schema(name).arrow
        return pa.schema([schema.field(c) for c in columns]).empty_table()
    return pa.concat_tables(parts)


def _missing_fields(name: str, dt: DeltaTable) -> list[pa.Field]:
    have = set(dt.schema().to_arrow().names)
    return [f.with_nullable(True) for f in contracts.schema(name).arrow if f.name not in have]


def _file_sizes(dt: DeltaTable) -> dict[str, int]:
    actions = pa.table(dt.get_add_actions(flatten=True))
    return dict(zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist()))


class IndexStore:
    """The Delta tables of one index, under `root/tables/<name>`; `root` is a local directory
    (a Path) or an object-store URI (a str). Storage options default to the environment's
    (see graphwright.storage.location); `files` holds the index's other files (vector indexes, the lease)."""

    def __init__(self, root: str | Path, storage_options: dict[str, str] | None = None):
        self.root = str(root).rstrip("/") if location.is_uri(str(root)) else Path(str(root).removeprefix("file://"))
        self.storage_options = (location.storage_options() if storage_options is None else storage_options) or None
        self.files = location.IndexFiles(self.root, self.storage_options)
        # while not None: each table written since it was set -> its Delta version before that
        # (what a stage's bytes_written is counted from, without reopening every table)
        self.journal: dict[str, int | None] | None = None
        self._table_stores: dict = {}
        self._snapshots = TableSnapshots(self._open, self.table_files)

    @property
    def is_remote(self) -> bool:
        return isinstance(self.root, str)

    def path(self, name: str) -> str:
        return location.join(self.root, "tables", name)

    def _table(self, name: str, version: int | None = None) -> DeltaTable | None:
        """The table (at a version) for reading, opened once per version and thread (storage.snapshots)."""
        return self._snapshots.get(name, version)

    def _open(self, name: str, version: int | None = None, pinned: bool = False) -> DeltaTable | None:
        """The table (at a version), its log verified (storage.health); None if it does not exist,
        StorageError if it cannot be read, or if a version's table has no log (`pinned`: that
        version was asked for, so it must not be a placeholder for a lost commit)."""
        try:
            dt = DeltaTable(self.path(name), version=version, storage_options=self.storage_options)
        except TableNotFoundError:
            if version is None:
                return None
            raise table_error(self.root, name, version, "its Delta log (_delta_log) is gone") from None
        except Exception as exc:  # a truncated or corrupt commit, a version no longer in the log
            raise table_error(self.root, name, version, exc) from None
        health.VERIFIER.verify(self.root, name, self.path(name), self.table_files(name), dt.version(), pinned)
        return dt

    def table_files(self, name: str):
        """An obstore store rooted at a table's folder (its data files and _delta_log)."""
        if name not in self._table_stores:
            self._table_stores[name] = location.open_store(self.path(name), self.storage_options)
        return self._table_stores[name]

    @contextmanager
    def _reading(self, name: str, dt: DeltaTable | None):
        """Turn a failed read (a data file gone or truncated) into a StorageError naming the table."""
        try:
            yield
        except health.StorageError:
            raise
        except Exception as exc:
            raise table_error(self.root, name, None if dt is None else dt.version(), exc) from None

    def exists(self, name: str) -> bool:
        return DeltaTable.is_deltatable(self.path(name), storage_options=self.storage_options)

    def version(self, name: str) -> int | None:
        dt = self._table(name)
        return None if dt is None else dt.version()

    def ensure(self, name: str) -> DeltaTable:
        """Create the table empty, with its contract's schema, if it does not exist yet; add the
        columns a newer contract gained (always nullable) to a table written by an older one. The
        table is opened for this writer alone."""
        dt = self._open(name)
        if dt is not None:
            missing = _missing_fields(name, dt)
            if missing:
                dt.alter.add_columns(list(Schema.from_arrow(pa.schema(missing)).fields), post_commithook_properties=KEEP_LOG)
                dt = self._open(name)
        if dt is None:
            schema = contracts.schema(name)
            dt = DeltaTable.create(
                self.path(name),
                schema=schema.arrow,
                partition_by=list(schema.partition_by) or None,
                mode="ignore",
                name=name, description=schema.description,
                configuration=TABLE_PROPERTIES,  # storage.log_retention
                storage_options=self.storage_options,
            )
        return dt

    def read(
        self,
        name: str,
        *,
        version: int | None = None,
        columns: list[str] | None = None,
        where: str | None = None,
    ) -> pa.Table:
        """Rows of a table (at a Delta version), cast to its contract. Missing table = empty."""
        dt = self._table(name, version)
        schema, query = self._query(name, dt, columns, where)
        if query is None:
            return schema.empty_table()
        with self._reading(name, dt):
            return pa.table(query.read_all()).cast(schema)

    def read_derived(self, name: str, columns: list[str], derived: dict[str, tuple[str, pa.DataType]]) -> pa.Table:
        """`columns` of a table, and columns computed by DataFusion (`derived`: name -> (SQL
        expression, type)) from columns that never become Arrow arrays here: reading the
        communities' chunk lists to count them left 6.3 GB resident at 1.2M chunks, counting them
        in the query 1.6 GB."""
        schema = pa.schema([contracts.schema(name).arrow.field(c) for c in columns]
                           + [pa.field(into, type_) for into, (_, type_) in derived.items()])
        dt = self._table(name)
        if dt is None:
            return schema.empty_table()
        select = ", ".join([f'"{c}"' for c in columns] + [f'{sql} AS "{into}"' for into, (sql, _) in derived.items()])
        with self._reading(name, dt):
            return pa.table(QueryBuilder().register("t", dt).execute(f"SELECT {select} FROM t").read_all()).cast(schema)

    def scanner(self, name: str, *, where: str | None = None,
                version: int | None = None) -> Callable[[list[str]], Iterator[pa.RecordBatch]]:
        """A function from columns to the table's rows as record batches (DataFusion streams them:
        the table is never whole in memory). Every call reads the version current when the
        scanner was made (or `version`)."""
        dt = self._table(name, version)

        def scan(columns: list[str]) -> Iterator[pa.RecordBatch]:
            schema, query = self._query(name, dt, columns, where)
            with self._reading(name, dt):
                for batch in query or ():
                    yield pa.record_batch(batch).cast(schema)

        return scan

    def distinct_array(self, name: str, column: str, where: str | None = None) -> pa.Array:
        """The distinct values of a column, gathered batch by batch (a mentions table holds each
        chunk id about twenty times), as Arrow: set operations over 1M chunk ids stay in Arrow."""
        parts = [pc.unique(batch.column(column)) for batch in self.scanner(name, where=where)([column])]
        kind = contracts.schema(name).arrow.field(column).type
        return pc.unique(pa.chunked_array(parts, kind)) if parts else pa.array([], kind)

    def rows_in(self, name: str, column: str, values, columns: list[str], version: int | None = None) -> pa.Table:
        """Rows whose `column` is one of `values` (at `version`). A few keys are asked for with
        IN-lists; many are found in one streaming pass with an Arrow filter (each IN-list query
        rescans the table, which made a stage asking for 1M chunk ids quadratic). Many keys are
        not sorted: the join hashes them (Python's sort of a report update's 362k relationship
        ids: 0.27 s alone, held the GIL against the entities' read beside it)."""
        values = values if isinstance(values, (set, frozenset)) else set(values)
        if len(values) <= IN_LIST_KEYS:
            return read_in(lambda n, **kw: self.read(n, version=version, **kw), name, column, values, columns)
        return self.semi_join(name, column, pa.array(list(values), pa.string()), columns, version=version)

    def semi_join(self, name: str, column: str, values: pa.Array, columns: list[str], *, version: int | None = None) -> pa.Table:
        """Rows whose `column` is one of `values`, in one hash join (DataFusion, `values` as the
        build side, written to a scratch table): a filter per scanned batch rebuilt a hash set of
        all the values every time (24 s against 2.3 s for 409k relationship ids)."""
        schema = contracts.schema(name).arrow
        empty = pa.schema([schema.field(c) for c in columns]).empty_table()
        dt = self._table(name, version)
        if dt is None or not len(values):
            return empty
        with tempfile.TemporaryDirectory(prefix="graphwright-keys-") as folder:
            write_deltalake(folder, pa.table({"__key": pc.unique(values.cast(schema.field(column).type))}))
            absent = {f.name for f in _missing_fields(name, dt)}
            select = ", ".join(f'NULL AS "{c}"' if c in absent else f't."{c}"' for c in columns)
            with self._reading(name, dt):
                query = (QueryBuilder().register("t", dt).register("k", DeltaTable(folder))
                         .execute(f'SELECT {select} FROM t JOIN k ON t."{column}" = k."__key"'))
                return pa.table(query.read_all()).cast(empty.schema) if columns else empty

    def _query(self, name: str, dt: DeltaTable | None, columns: list[str] | None, where: str | None):
        """(the contract's schema for `columns`, a DataFusion batch reader or None if no table)."""
        schema = contracts.schema(name).arrow
        if columns:
            schema = pa.schema([schema.field(c) for c in columns])
        if dt is None:
            return schema, None
        # a version written under an older contract lacks the columns added since: read them as nulls
        absent = {f.name for f in _missing_fields(name, dt)}
        select = ", ".join(f'NULL AS "{c}"' if c in absent else f'"{c}"' for c in schema.names)
        schema = pa.schema([f.with_nullable(True) if f.name in absent else f for f in schema])
        sql = f"SELECT {select} FROM t" + (f" WHERE {where}" if where else "")
        with self._reading(name, dt):
            return schema, QueryBuilder().register("t", dt).execute(sql)

    def count(self, name: str, version: int | None = None, where: str | None = None) -> int:
        dt = self._table(name, version)
        if dt is None:
            return 0
        sql = "SELECT count(*) AS n FROM t" + (f" WHERE {where}" if where else "")
        with self._reading(name, dt):
            result = pa.table(QueryBuilder().register("t", dt).execute(sql).read_all())
        return int(result.column("n")[0].as_py())

    def _writing(self, name: str) -> None:
        journal = self.journal  # the running stage's, which the runner may end meanwhile (pipeline.early)
        if journal is not None and name not in journal:
            journal.setdefault(name, self.version(name))

    def overwrite(self, name: str, table: pa.Table) -> int:
        """Replace the table's contents atomically (one Delta commit). Returns the new version."""
        data = contracts.schema(name).validate(table)
        self._writing(name)
        self.ensure(name)
        write_deltalake(self.path(name), data, mode="overwrite", storage_options=self.storage_options, **delta_write(name))
        return self.version(name)

    def upsert(self, name: str, table: pa.Table) -> int:
        """MERGE rows by primary key: rerunning the same upsert changes nothing (idempotent)."""
        schema = contracts.schema(name)
        data = schema.validate(table)
        self._writing(name)
        dt = self.ensure(name)
        if data.num_rows:
            on = " AND ".join(f't."{k}" = s."{k}"' for k in schema.primary_key)
            merge = dt.merge(data, predicate=on, source_alias="s", target_alias="t", **delta_write(name))
            merge.when_matched_update_all().when_not_matched_insert_all().execute()
        return self.version(name)

    def append(self, name: str, table: pa.Table) -> int:
        data = contracts.schema(name).validate(table)
        self._writing(name)
        # one opening of the table per append: the write and the version it returns use it (each
        # opening replays the log since its checkpoint; a stage appends to several tables per commit)
        dt = self.ensure(name)
        if data.num_rows:
            write_deltalake(dt, data, mode="append", **delta_write(name))
        return dt.version()

    def replace_if_changed(self, name: str, table: pa.Table) -> dict:
        """Overwrite the table with `table` unless it already holds exactly these rows (so a no-op
        run adds no Delta version). Returns row counts: added, removed, changed, unchanged."""
        return self.replace_parts_if_changed(name, [table])

    def replace_parts_if_changed(self, name: str, parts: Iterable[pa.Table]) -> dict:
        """replace_if_changed for a table given a part at a time (never whole in memory). The
        parts are spilled (see `spill`); the diff compares row digests with a streamed scan of
        the current table (which is never read whole either); if anything changed, the spilled
        files become the table in one Delta commit."""
        schema = contracts.schema(name)
        with tempfile.TemporaryDirectory(prefix=f"graphwright-{name}-") as folder:
            files, digests = [], [row_digests(schema.arrow.empty_table(), schema.primary_key)]
            for path, data in spill(name, parts, folder):
                files.append((path, data.num_rows))
                digests.append(row_digests(data, schema.primary_key))
            new = pa.concat_tables(digests)
            if pc.count_distinct(key_column(new, schema.primary_key)).as_py() != new.num_rows:
                raise contracts.SchemaError(f"table {name}: its parts repeat a primary key {list(schema.primary_key)}")
            old = pa.concat_tables([digests[0], *(row_digests(pa.Table.from_batches([batch]), schema.primary_key)
                                                  for batch in self.scanner(name)(schema.arrow.names))])
            diff = row_diff(old, new, (*schema.primary_key,))
            if diff["added"] or diff["removed"] or diff["changed"] or not self.exists(name):
                self._writing(name)
                dt = self.ensure(name)
                if schema.partition_by:
                    batches = (batch for path, _ in files for batch in pq.ParquetFile(path).iter_batches())
                    reader = pa.RecordBatchReader.from_batches(schema.arrow, batches)
                    write_deltalake(self.path(name), reader, mode="overwrite", storage_options=self.storage_options, **delta_write(name))
                else:
                    self._commit_files(dt, name, files)
        return diff

    def append_files(self, name: str, files: list[tuple[str, int]]) -> int:
        """Append spilled Parquet files, given as (path, rows), to a table in one Delta commit, so
        that a run killed before it adds nothing; for rows whose keys the table does not hold (a
        first load). Files without rows are left out. Returns the rows appended."""
        if contracts.schema(name).partition_by:
            raise ValueError(f"append_files does not write partitioned tables ({name})")
        files = [(path, rows) for path, rows in files if rows]
        if files:
            self._writing(name)
            self._commit_files(self.ensure(name), name, files, mode="append")
        return sum(rows for _, rows in files)

    def _commit_files(self, dt: DeltaTable, name: str, files: list[tuple[str, int]], mode: str = "overwrite") -> None:
        """Overwrite a table with Parquet files already written, given as (path, rows), in one Delta
        commit, or append them (`mode="append"`). (Given the same rows as a stream, write_deltalake
        held ~2.7x their Arrow size: 5.5 GB for 2 GB of communities.) The files are uploaded
        first; the commit makes them part of the table."""
        import obstore

        table_files, actions, batch = location.open_store(self.path(name), self.storage_options), [], uuid.uuid4().hex
        for i, (local, rows) in enumerate(files):
            relative = f"part-{i:05d}-{batch}.parquet"  # a file name, not an id: unique per write
            obstore.put(table_files, relative, Path(local))
            actions.append(AddAction(relative, Path(local).stat().st_size, {}, int(time.time() * 1000), True,
                                     json.dumps({"numRecords": rows})))
        dt.create_write_transaction(actions, mode=mode, schema=contracts.schema(name).arrow, post_commithook_properties=KEEP_LOG)

    def delete(self, name: str, where: str) -> int:
        """Delete the rows matching a SQL predicate; returns how many were deleted."""
        dt = self._open(name)
        if dt is None:
            return 0
        journal = self.journal
        if journal is not None:
            journal.setdefault(name, dt.version())
        return int(dt.delete(where, **delta_write(name)).get("num_deleted_rows", 0))

    def delete_in(self, name: str, column: str, values, *, also: str | None = None) -> int:
        """Delete rows whose `column` is in `values` (and that match the SQL predicate `also`),
        DELETE_IN_KEYS values per Delta DELETE."""
        values = sorted(set(values))
        deleted = 0
        for start in range(0, len(values), DELETE_IN_KEYS):
            predicate = f'"{column}" IN {sql_list(values[start:start + DELETE_IN_KEYS])}'
            deleted += self.delete(name, f"({also}) AND {predicate}" if also else predicate)
        return deleted

    def bytes_added(self, name: str, since_version: int | None) -> int:
        """Bytes of the data files committed to a table after `since_version` (None: since it was
        created), summed commit by commit so files a later commit rewrote still count."""
        dt = self._table(name)
        if dt is None or dt.version() == since_version:
            return 0
        first = 0 if since_version is None else since_version + 1
        from graphwright.storage.changes import bytes_added  # the log's add actions: no snapshot opened per version

        if (logged := bytes_added(self, name, first, dt.version())) is not None:
            return logged
        before = set() if since_version is None else _file_sizes(self._table(name, since_version))
        total = 0
        for version in range(first, dt.version() + 1):
            files = _file_sizes(self._table(name, version))
            total += sum(size for path, size in files.items() if path not in before)
            before = files
        return total

    def versions(self) -> dict[str, int]:
        """Current Delta version of every table that exists."""
        return {name: v for name in contracts.all_schemas() if (v := self.version(name)) is not None}
