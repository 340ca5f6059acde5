"""What a cache lookup costs as the cache grows: engines.llm.cache.lookup, the function every LLM
stage calls once per round, against each given index's `llm_cache`. Per index: a round asking
every cached key again (all hits, as a rerun of a stage asks), a round of as many absent keys
(all misses, as a first build asks), and one commit-sized lookup of 4,096 keys (what a per-batch
lookup would cost each time). Prints seconds, and seconds per 1,000 keys; asserts nothing.

    python bench/cache_lookup.py --index /work/bench-indexes/issue-18/index-10000 --index ...-100000 ...
"""

from __future__ import annotations

import argparse
import hashlib
import time

import pyarrow.compute as pc


def measure(index: str) -> str:
    from graphwright.engines.llm.cache import lookup
    from graphwright.storage.delta import IndexStore

    store = IndexStore(index)
    keys = pc.unique(store.read("llm_cache", columns=["key"]).column("key").combine_chunks())
    absent = [hashlib.sha256(f"absent-{i}".encode()).hexdigest() for i in range(len(keys))]
    out = []
    for label, asked in (("all hits", keys), ("all misses", absent), ("4,096 hits", keys.slice(0, 4096))):
        started = time.perf_counter()
        found = lookup(store, asked)
        took = time.perf_counter() - started
        out.append(f"{label}: {len(asked):,} keys {took:.2f} s ({took * 1000 / len(asked):.4f} s per 1k), {found.num_rows:,} found")
    return f"{index}: cache of {len(keys):,} keys | " + " | ".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", action="append", required=True)
    for index in p.parse_args().index:
        print(measure(index), flush=True)


if __name__ == "__main__":
    main()
