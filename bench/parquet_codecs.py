"""What a table's data files cost to write and read with each Parquet codec and row-group size,
side by side in one process (storage.parquet_files chose the index's).

    python bench/parquet_codecs.py --index DIR/index-1000000 --tables entities,relationships,documents [--files 2]

For each table, its largest `--files` data files are read into one Arrow table, which is written
to a temporary file and read back with Snappy in one row group (what a patch wrote before),
then Snappy, LZ4 and zstd-1 in row groups of ROW_GROUP_BYTES. Each setting runs `--repeat`
times, alternating, and the least time is printed. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from graphwright.storage.parquet_files import row_group_rows  # noqa: E402

SETTINGS = {
    "snappy, one row group": {"compression": "snappy", "row_group_size": None},
    "snappy": {"compression": "snappy"},
    "lz4": {"compression": "lz4"},
    "zstd-1": {"compression": "zstd", "compression_level": 1},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--tables", default="entities,relationships,documents")
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    for name in a.tables.split(","):
        files = sorted((Path(a.index) / "tables" / name).rglob("*.parquet"), key=lambda p: p.stat().st_size)[-a.files:]
        if not files:
            print(f"{name}: no data files")
            continue
        table = pa.concat_tables([pq.read_table(f) for f in files])
        times = {label: ([], []) for label in SETTINGS}
        with tempfile.TemporaryDirectory() as tmp:
            path, size = Path(tmp) / "x.parquet", {}
            for _ in range(a.repeat):
                for label, options in SETTINGS.items():
                    options = {"row_group_size": row_group_rows(table), **options}
                    if options["row_group_size"] is None:
                        options["row_group_size"] = table.num_rows
                    started = time.perf_counter()
                    pq.write_table(table, path, **options)
                    times[label][0].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    pq.read_table(path)
                    times[label][1].append(time.perf_counter() - started)
                    size[label] = path.stat().st_size
        print(f"{name}: {table.num_rows} rows, {table.nbytes >> 20} MB as Arrow, from {len(files)} file(s)")
        for label, (writes, reads) in times.items():
            print(f"  {label:<22} write {min(writes):5.2f} s  read {min(reads):5.2f} s  {size[label] >> 20:5d} MB")


if __name__ == "__main__":
    main()
