"""Incremental updates by real dates: Microsoft earnings-call transcripts, one quarter at a time.

    python bench/incremental_msft.py [--data ../shared/data/msft-earnings/txt] [--work DIR] [--config FILE]

Indexes the first 33 quarters, adds the remaining ones one run at a time, deletes two quarters,
then builds the final corpus from scratch and compares. Prints one row per run: seconds, chunks
extracted, entities/relationships touched, reports built vs reused, embeddings computed, the
share of a full build's extraction work the run did, and with an LLM extractor the tokens spent
beside what extracting the whole corpus costs (from the token counts the cache recorded).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from graphwright.config import load_config
from graphwright.pipeline.runner import run_delete, run_index
from graphwright.storage.delta import IndexStore


def row(label: str, s: dict, seconds: float, full_chunks: int) -> str:
    r = s["recomputed"]
    touched = lambda d: d["added"] + d["removed"] + d["changed"]  # noqa: E731
    embedded = sum(v["embedded"] for v in r["embeddings"].values())
    share = r["chunks_extracted"] / full_chunks if full_chunks else 0
    llm = s.get("llm") or {}
    spent = llm.get("prompt_tokens", 0) + llm.get("completion_tokens", 0)
    tokens = f" {spent:9d} {spent / llm['full_rebuild_tokens']:7.1%}" if llm.get("full_rebuild_tokens") else ""
    return (f"{label:<22} {seconds:7.1f} {s['documents']:5d} {s['chunks']:6d} {r['chunks_extracted']:6d} {share:7.1%} "
            f"{touched(r['entities']):6d} {touched(r['relationships']):6d} {r['reports_built']:6d} {r['reports_reused']:6d} {embedded:7d} {s['version']:4d}"
            + tokens)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="../shared/data/msft-earnings/txt")
    parser.add_argument("--work", default=None)
    parser.add_argument("--config", default=None)
    parser.add_argument("--initial", type=int, default=33)
    args = parser.parse_args()
    data = Path(args.data)
    if not data.is_dir():
        print(f"skipped: {data} not found")
        return 0
    config = load_config(args.config)
    files = sorted(data.glob("Transcript*.txt"))
    work = Path(args.work or tempfile.mkdtemp(prefix="gw-msft-"))
    src, index, fresh = work / "src", work / "index", work / "fresh"
    for p in (src, index, fresh):
        shutil.rmtree(p, ignore_errors=True)
    src.mkdir(parents=True)
    quiet = lambda msg: None  # noqa: E731

    header = (f"{'run':<22} {'sec':>7} {'docs':>5} {'chunks':>6} {'extr':>6} {'of full':>7} {'ent±':>6} {'rel±':>6} {'rep+':>6} {'rep=':>6} {'embed':>7} {'ver':>4}"
              + (f" {'tokens':>9} {'of full':>7}" if config.extract.engine == "llm" else ""))
    print(header)
    total_chunks = None
    for f in files[: args.initial]:
        shutil.copy(f, src / f.name)
    t = time.perf_counter()
    s = run_index([str(src)], index, config, show_progress=False, log=quiet)
    total_chunks = s["chunks"]
    print(row(f"initial {args.initial} quarters", s, time.perf_counter() - t, s["chunks"]), flush=True)
    for f in files[args.initial:]:
        shutil.copy(f, src / f.name)
        t = time.perf_counter()
        s = run_index([str(src)], index, config, show_progress=False, log=quiet)
        print(row(f"+ {f.stem[10:]}", s, time.perf_counter() - t, s["chunks"]), flush=True)
    t = time.perf_counter()
    s = run_index([str(src)], index, config, show_progress=False, log=quiet)
    print(row("rerun, no change", s, time.perf_counter() - t, s["chunks"]), flush=True)
    deleted = [files[5].name, files[20].name]
    for name in deleted:
        (src / name).unlink()
    t = time.perf_counter()
    s = run_delete(index, doc_ids=deleted, show_progress=False, log=quiet)
    print(row(f"- {', '.join(n[10:-4] for n in deleted)}", s, time.perf_counter() - t, s["chunks"]), flush=True)
    t = time.perf_counter()
    full = run_index([str(src)], fresh, config, show_progress=False, log=quiet)
    print(row("full rebuild (fresh)", full, time.perf_counter() - t, full["chunks"]), flush=True)

    a, b = IndexStore(index), IndexStore(fresh)
    for name, key in (("documents", "doc_id"), ("chunks", "chunk_id"), ("entities", "entity_id"), ("relationships", "relationship_id")):
        cols = [c for c in a.read(name).column_names if c != "run_id"]
        same = a.read(name, columns=cols).sort_by(key).equals(b.read(name, columns=cols).sort_by(key))
        print(f"updated == fresh for {name}: {same}")
    print(f"initial corpus chunks: {total_chunks}; work dir: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
