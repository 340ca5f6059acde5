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
Spark 3.4+, DuckDB, polars, DataFusion and pyarrow."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

CODEC = "lz4"  # pyarrow's name; LZ4_RAW to delta-rs
ROW_GROUP_BYTES = 32 << 20


def row_group_rows(table: pa.Table) -> int:
    """Rows per row group of about ROW_GROUP_BYTES (of the table's average row)."""
    return max(1, table.num_rows * ROW_GROUP_BYTES // max(1, table.nbytes))


def write_parquet(table: pa.Table, where) -> None:
    """Write a table's rows as one data file (a path or a writable file)."""
    pq.write_table(table, where, compression=CODEC, row_group_size=row_group_rows(table))


def delta_writer_properties():
    """The same settings for delta-rs's writer (write_deltalake, MERGE, DELETE, compaction)."""
    from deltalake import WriterProperties

    return WriterProperties(compression="LZ4_RAW")
