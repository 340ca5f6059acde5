"""How the index writes the data files of its Delta tables, whoever writes them (a spill, a
patch, delta-rs): LZ4 (LZ4_RAW in the file), in row groups of about ROW_GROUP_BYTES of Arrow data.

A reader decodes the row groups of a file in parallel and each one whole, so one row group per
file reads on one core, and a very large one must be held whole. An update's patch reads and
rewrites the files that hold the entities' and relationships' chunk lists (lists of hex ids),
so their codec is paid every update, and ingest spills every document's text each run. On
the 1.2M-chunk index's 386 MB entities file (pyarrow 26, bench host), Snappy in one row group
read in 2.7 s and wrote in 2.4 s; in 32 MB row groups Snappy read in 1.2 s and wrote in 2.1 s,
LZ4 0.4 s and 1.7 s (412 MB), zstd-1 0.9 s and 2.1 s (208 MB). zstd halves the bytes but
writes text 60% slower than Snappy, which made ingest and extract of a 1% update slower; LZ4 is
the fastest both ways at 7% more bytes than Snappy (docs/benchmarks.md). LZ4_RAW is read by
Spark 3.4+, DuckDB, polars, DataFusion and pyarrow.

Id columns (the string values of `*_id` and `*_ids` fields: hex hashes, which LZ4, having no
entropy coder, hardly shrinks) are written uncompressed by write_parquet: on that index's
entities file LZ4 saved 10% of the bytes (432 MB against 481 MB) and took more than half of
the write (1.41 s against 0.63 s), on a 257 MB relationships file 9% and a third (1.27 s
against 0.84 s); both read faster without it. delta-rs sets no codec per column: the files it
writes (full overwrites, MERGE, DELETE, compaction) compress their ids too."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from graphwright.storage.log_retention import KEEP_LOG

CODEC = "lz4"  # pyarrow's name; LZ4_RAW to delta-rs
ROW_GROUP_BYTES = 32 << 20


def row_group_rows(table: pa.Table) -> int:
    """Rows per row group of about ROW_GROUP_BYTES (of the table's average row)."""
    return max(1, table.num_rows * ROW_GROUP_BYTES // max(1, table.nbytes))


def leaf_paths(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    """(path, type) of each leaf column as Parquet names it: a list's values are `name.list.element`."""
    def walk(name: str, kind: pa.DataType):
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            yield from walk(f"{name}.list.element", kind.value_type)
        elif pa.types.is_struct(kind):
            for child in kind:
                yield from walk(f"{name}.{child.name}", child.type)
        else:
            yield name, kind

    return [leaf for field in schema for leaf in walk(field.name, field.type)]


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The leaf columns written with a dictionary: all but floating-point ones. A vector's floats
    hardly repeat, and trying a dictionary first made writing embeddings files about 1.5 times
    slower (24,576 chunk vectors: 0.35 s against 0.23 s), which an update pays for every file
    it rewrites to delete stale vectors. Ids and chunk lists keep theirs (entities: 32 MB with,
    51 MB without)."""
    return [path for path, kind in leaf_paths(schema) if not pa.types.is_floating(kind)]


def compression(schema: pa.Schema) -> dict[str, str]:
    """Each leaf column's codec: none for ids (module docstring), CODEC for the rest."""
    def is_id(path: str, kind: pa.DataType) -> bool:
        return path.split(".", 1)[0].endswith(("_id", "_ids")) and (pa.types.is_string(kind) or pa.types.is_large_string(kind))
    return {path: "none" if is_id(path, kind) else CODEC for path, kind in leaf_paths(schema)}


def write_parquet(table: pa.Table, where) -> None:
    """Write a table's rows as one data file (a path or a writable file)."""
    pq.write_table(table, where, compression=compression(table.schema), row_group_size=row_group_rows(table),
                   use_dictionary=dictionary_columns(table.schema))


@functools.cache
def delta_writer_properties(name: str):
    """The same settings for delta-rs's writer (write_deltalake, MERGE, DELETE, compaction) of
    table `name`: its floating-point columns without a dictionary, as write_parquet writes them,
    and LZ4 for every column (delta-rs sets no codec per column, so ids are compressed here).
    delta-rs sets a column's properties by name for top-level columns only, so a table with a
    float inside a list (embeddings' vectors) turns dictionaries off by default and on for each
    of its other top-level columns."""
    from deltalake import ColumnProperties, WriterProperties

    from graphwright.storage import contracts

    schema = contracts.schema(name).arrow
    floats = [path for path, kind in leaf_paths(schema) if pa.types.is_floating(kind)]
    off, on = ColumnProperties(dictionary_enabled=False), ColumnProperties(dictionary_enabled=True)
    if any("." in path for path in floats):
        return WriterProperties(compression="LZ4_RAW", default_column_properties=off,
                                column_properties={f.name: on for f in schema
                                                   if not pa.types.is_nested(f.type) and not pa.types.is_floating(f.type)})
    return WriterProperties(compression="LZ4_RAW", column_properties={path: off for path in floats})


def delta_write(name: str) -> dict:
    """delta-rs's write options for table `name`."""
    return {"writer_properties": delta_writer_properties(name), "post_commithook_properties": KEEP_LOG}


def spill(name: str, parts: Iterable[pa.Table], folder: str) -> Iterator[tuple[str, pa.Table]]:
    """Each part of a table, validated against its contract and written to a Parquet file in
    `folder`: yields (path, validated part). A table too large to hold is diffed, filtered and
    committed from these files; a part that fails validation stops the spill before any commit."""
    from graphwright.storage import contracts

    schema = contracts.schema(name)
    for i, part in enumerate(parts):
        data = schema.validate(part)
        path = f"{folder}/{i:06d}.parquet"
        # row groups of a bounded size: a level of communities, written as one, held 1.3 GB of
        # chunk lists at 1.2M chunks
        write_parquet(data, path)
        yield path, data
