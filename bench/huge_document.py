"""Peak memory on one huge document (issue 22): a 50 MB text file made of the development
corpora (../shared/data: A Christmas Carol, the two novels, the earnings calls, repeated).

Each measurement runs in a fresh process (bench/_fresh_process.py) and reports that process's
peak RSS, and for an index run the peak of every process it started (Ray's raylet and workers),
sampled from /proc every 0.2 s:
- `chunk`: chunking the document alone, streaming (the chunker) and whole (the chunker before
  streaming, tests/_chunking_reference.py: one tokenizer encode of the whole text);
- `index`: `graphwright index` of a folder holding only the document, executor local and ray
  (hashing embedder, the default nlp extractor and chunk size), with the ingest and chunk
  stages' own driver peaks from stage_metrics.

    flock /tmp/gw-bench.lock .venv/bin/python bench/huge_document.py [--mb 50] [--skip-whole]

Skips (exit 0) without ../shared/data.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _fresh_process import measure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def make_document(path: Path, mb: int) -> None:
    texts = [(DATA / "smoke" / "a_christmas_carol.txt").read_text()]
    texts += [json.loads(line)["text"] for line in (DATA / "novel-dev" / "corpus.jsonl").open()]
    texts += [p.read_text() for p in sorted((DATA / "msft-earnings" / "txt").glob("*.txt"))]
    base, target, parts, size, i = "\n\n".join(texts), mb << 20, [], 0, 0
    while size < target:
        part = f"\n\nPart {i}.\n\n" + base
        parts.append(part)
        size, i = size + len(part), i + 1
    path.write_text("".join(parts)[:target])


def rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            found.append(child)
            stack.append(child)
    return found


class TreeSampler:
    """Peak RSS of each process under this one, and of all of them together."""

    def __init__(self):
        self.peak_each: dict[int, int] = {}
        self.peak_total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.2):
            total = 0
            for pid in [os.getpid(), *descendants(os.getpid())]:
                kb = rss_kb(pid)
                total += kb
                self.peak_each[pid] = max(self.peak_each.get(pid, 0), kb)
            self.peak_total = max(self.peak_total, total)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run_chunk(path: str, whole: bool) -> dict:
    text = Path(path).read_text()
    started = time.perf_counter()
    if whole:
        sys.path.insert(0, str(ROOT / "tests"))
        from _chunking_reference import reference_chunks

        n = len(reference_chunks(text, 254, 32))
    else:
        from graphwright.stages.chunk import chunk_text

        n = len(chunk_text("doc", text, 254, 32))
    return {"chunks": n, "seconds": round(time.perf_counter() - started, 1),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def run_index(folder: str, index: str, executor: str) -> dict:
    from graphwright.config import load_config
    from graphwright.pipeline.runner import run_index as index_run
    from graphwright.storage.delta import IndexStore

    config = load_config(None, {"embed": {"engine": "hashing"}, "execution": {"executor": executor, "num_cpus": 2}})
    started = time.perf_counter()
    with TreeSampler() as tree:
        summary = index_run([folder], index, config, show_progress=False, log=lambda m: None)
    stages = {r["stage"]: json.loads(r["details"]).get("driver_peak_rss_mb")
              for r in IndexStore(index).read("stage_metrics").to_pylist()}
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return {"chunks": summary["chunks"], "seconds": round(time.perf_counter() - started, 1), "driver_peak_rss_mb": own,
            "largest_other_process_mb": max((kb for pid, kb in tree.peak_each.items() if pid != os.getpid()), default=0) // 1024,
            "all_processes_peak_mb": tree.peak_total // 1024,
            "driver_peak_after_ingest_mb": stages.get("ingest"), "driver_peak_after_chunk_mb": stages.get("chunk")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--skip-whole", action="store_true", help="do not measure the whole-document chunker (7+ GB)")
    parser.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        kind, *rest = args.measure
        result = run_chunk(rest[0], rest[1] == "whole") if kind == "chunk" else run_index(*rest)
        print(json.dumps(result))
        return
    if not DATA.is_dir():
        print(f"skipped: no development data at {DATA}")
        return
    with tempfile.TemporaryDirectory(prefix="gw-huge-") as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        doc = folder / "huge.txt"
        make_document(doc, args.mb)
        print(f"document: {doc.stat().st_size / 2**20:.1f} MB")
        for mode in ("streaming",) + (() if args.skip_whole else ("whole",)):
            r = measure(__file__, "--measure", "chunk", str(doc), mode)
            print(f"chunk_text {mode:<9}: {r['chunks']} chunks, {r['seconds']} s, peak RSS {r['peak_rss_mb']} MB")
        for executor in ("local", "ray"):
            r = measure(__file__, "--measure", "index", str(folder), str(Path(tmp) / f"index-{executor}"), executor)
            print(f"index --executor {executor:<5}: {r['chunks']} chunks, {r['seconds']} s; peak RSS driver {r['driver_peak_rss_mb']} MB "
                  f"(after ingest {r['driver_peak_after_ingest_mb']}, after chunk {r['driver_peak_after_chunk_mb']}), "
                  f"largest other process {r['largest_other_process_mb']} MB, all processes together {r['all_processes_peak_mb']} MB")


if __name__ == "__main__":
    main()
