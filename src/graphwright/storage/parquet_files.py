"""How the index writes the data files of its Delta tables, whoever writes them (a spill, a
patch, delta-rs): zstd at level 1, in row groups of about ROW_GROUP_BYTES of Arrow data.

A reader decodes the row groups of a file in parallel and each one whole, so one row group per
file reads on one core, and a very large one must be held whole. An update's patch reads and
rewrites the files that hold the entities' and relationships' chunk lists (lists of hex ids),
so their codec is paid every update. On the 1.2M-chunk index's 386 MB entities file (pyarrow
26, bench host), Snappy in one row group read in 2.7 s and wrote in 2.4 s; zstd-1 in 32 MB row
groups read in 0.8-1.3 s and wrote in 2.3 s, at 208 MB (docs/benchmarks.md)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

CODEC, LEVEL = "zstd", 1
ROW_GROUP_BYTES = 32 << 20


def row_group_rows(table: pa.Table) -> int:
    """Rows per row group of about ROW_GROUP_BYTES (of the table's average row)."""
    return max(1, table.num_rows * ROW_GROUP_BYTES // max(1, table.nbytes))


def write_parquet(table: pa.Table, where) -> None:
    """Write a table's rows as one data file (a path or a writable file)."""
    pq.write_table(table, where, compression=CODEC, compression_level=LEVEL, row_group_size=row_group_rows(table))


def delta_writer_properties():
    """The same settings for delta-rs's writer (write_deltalake, MERGE, DELETE, compaction)."""
    from deltalake import WriterProperties

    return WriterProperties(compression=CODEC.upper(), compression_level=LEVEL)
