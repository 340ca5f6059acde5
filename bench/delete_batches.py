"""Deleting rows by key from a Delta table: IndexStore.delete_in's IN lists of N values per DELETE.

    python bench/delete_batches.py --rows 1200000 --delete 14000 --batches 1000,5000
    python bench/delete_batches.py --table /tmp/gw-scale/index-1000000/tables/embeddings --delete 14000

Every DELETE scans the table and rewrites each file holding a match, so the number of DELETEs is
what costs: an update deletes the stale embeddings of its changed chunks, spread over every file
of the chunk partition. The generated table is shaped like the embeddings table (item id, kind,
384-dim vector; written in 16 appends); `--table` copies a real one instead (it is never
modified). For each batch size: a fresh copy, then `delete_in` of the same random keys; prints
seconds, DELETE commits and the peak RSS of a child process per run. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa


def generate(path: Path, rows: int, dim: int = 384) -> None:
    from deltalake import write_deltalake

    rng = np.random.default_rng(0)
    ids = np.char.add("chunk-", np.arange(rows).astype(str))
    rng.shuffle(ids)
    for part in np.array_split(np.arange(rows), 16):
        vectors = rng.random((len(part), dim), dtype=np.float32)
        write_deltalake(str(path), pa.table({
            "item_id": pa.array(ids[part]), "kind": pa.array(["chunk"] * len(part)),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim)}), mode="append")


def one(root: Path, keys: list[str], batch: int) -> dict:
    """In a child process: IndexStore.delete_in of `keys` from root's embeddings table, with lists
    of `batch` values."""
    import graphwright.storage.delta as store_module

    store_module.DELETE_IN_KEYS = batch
    store = store_module.IndexStore(root)
    before = store.version("embeddings")
    started = time.perf_counter()
    deleted = store.delete_in("embeddings", "item_id", keys)
    return {"batch": batch, "seconds": time.perf_counter() - started, "deleted": deleted,
            "commits": store.version("embeddings") - before,
            "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--delete", type=int, default=5_000)
    p.add_argument("--batches", default="1000,5000")
    p.add_argument("--table", type=Path, help="a Delta table with an item_id column to copy instead of generating one")
    p.add_argument("--one", nargs=3, help=argparse.SUPPRESS)  # child: INDEX_ROOT KEYS_JSON BATCH
    a = p.parse_args()
    if a.one:
        print(json.dumps(one(Path(a.one[0]), json.loads(Path(a.one[1]).read_text()), int(a.one[2]))))
        return 0
    from deltalake import DeltaTable

    with tempfile.TemporaryDirectory(prefix="gw-delete-") as tmp:
        source = a.table or Path(tmp) / "source"
        if not a.table:
            started = time.perf_counter()
            generate(source, a.rows)
            print(f"generated {a.rows} rows in {time.perf_counter() - started:.1f} s", flush=True)
        ids = DeltaTable(str(source)).to_pyarrow_dataset().to_table(columns=["item_id"]).column("item_id")
        keys = sorted(np.random.default_rng(1).choice(ids.to_numpy(zero_copy_only=False), a.delete, replace=False).tolist())
        (Path(tmp) / "keys.json").write_text(json.dumps(keys))
        print(f"deleting {len(keys)} of {len(ids)} rows")
        for batch in (int(b) for b in a.batches.split(",")):
            copy = Path(tmp) / f"copy-{batch}"
            shutil.copytree(source, copy / "tables" / "embeddings")
            out = subprocess.run([sys.executable, __file__, "--one", str(copy), str(Path(tmp) / "keys.json"), str(batch)],
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"  lists of {r['batch']:>6}: {r['seconds']:7.1f} s, {r['commits']} DELETEs, {r['deleted']} rows, peak {r['peak_gib']:.2f} GiB", flush=True)
            shutil.rmtree(copy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
