"""Extract's clean-up of removed chunks, the two ways side by side in one process: the distinct
chunk ids of each table (IndexStore.distinct_array) and a Delta DELETE per 5,000 removed ids
(IndexStore.delete_in), what extract did, against each file's chunk ids read once
(distinct_per_file) and one patch per table that rewrites only the files holding a removed id
(storage.patch.delete_matching), what extract does now. Each way runs on its own hard-linked copy
of --index, in the order A B B A; the rows left must be the same.

    python bench/deletion_paths.py --index DIR/index-1000000 --work /tmp/dp --documents 500
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from update_cost import copy_index  # noqa: E402

TABLES = ("mentions", "assertions", "extractions")


def chunks_of_documents(index: Path, documents: int) -> list[str]:
    """The chunk ids of the first `documents` documents by source key (what deleting them removes)."""
    import pyarrow.compute as pc

    from graphwright.storage.delta import IndexStore

    store = IndexStore(index)
    docs = store.read("documents", columns=["doc_id", "source_key"]).sort_by("source_key").slice(0, documents)
    chunks = store.read("chunks", columns=["chunk_id", "doc_id"])
    return chunks.filter(pc.is_in(chunks.column("doc_id"), value_set=docs.column("doc_id"))).column("chunk_id").to_pylist()


def by_delete(index: Path, gone: list[str]) -> dict[str, int]:
    from graphwright.storage.delta import IndexStore

    store = IndexStore(index)
    for name in TABLES:
        store.distinct_array(name, "chunk_id")
    return {name: store.delete_in(name, "chunk_id", gone) for name in TABLES}


def by_patch(index: Path, gone: list[str]) -> dict[str, int]:
    from graphwright.storage.delta import IndexStore
    from graphwright.storage.patch import delete_matching, distinct_per_file

    store = IndexStore(index)
    return {name: delete_matching(store, name, "chunk_id", gone, known=distinct_per_file(store, name, "chunk_id")) for name in TABLES}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--work", type=Path, default=Path("/tmp/graphwright-deletion-paths"))
    p.add_argument("--documents", type=int, default=500)
    a = p.parse_args()
    gone = chunks_of_documents(a.index, a.documents)
    print(f"{len(gone)} chunks of {a.documents} documents", flush=True)
    results = {}
    for label, way in (("delete", by_delete), ("patch", by_patch), ("patch#2", by_patch), ("delete#2", by_delete)):
        target = a.work / label
        copy_index(a.index, target)
        started = time.perf_counter()
        deleted = way(target, gone)
        results[label] = (time.perf_counter() - started, deleted)
        print(f"  {label:<9} {results[label][0]:6.2f} s  rows deleted {deleted}", flush=True)
        shutil.rmtree(target)
    if results["delete"][1] != results["patch"][1]:
        raise SystemExit("the two ways deleted different rows")
    for way in ("delete", "patch"):
        print(f"{way}: mean {(results[way][0] + results[way + '#2'][0]) / 2:.2f} s")


if __name__ == "__main__":
    main()
